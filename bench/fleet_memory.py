"""The memory of the default fleet (`synedre fleet`: beat, one worker per process of each
group of synedre.pipeline.WORKER_GROUPS, the IDLE watcher, the supervisor) by group: idle
45 s after it is ready, then the most it held during two loads, each sampled twice a second:

- classify: a burst of mail at once (`--burst`, through scan, OCR, classification and
  materialize to the launch, where the paused switch holds it);
- pipeline: pipeline_latency's run on this very fleet (`-n` messages: the agent's CLI,
  deploy, Chromium for QA, the recap), its two lines printed beside, with their targets.

Memory is PSS where the kernel gives it (`smaps_rollup`: shared pages counted once across
the fleet, so the figures add up), else RSS. The embedded PostgreSQL is apart (the bench's
services run their own; `synedre fleet` does not start one when SYNEDRE_DATABASE_URL is set):
its server's processes are printed beside (`postgres_mib`), not in the total.
What the workers start (the agent's CLI, `./deploy`, Chromium) counts in their group and is
also printed apart (`tools`). Baseline: one bare Celery worker (an app with no task, solo pool)
measured in the same run. Target: the fleet's total under load at most 800 MiB.
Runs from a plain shell: see _stack.py.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil
import psycopg
from _loop import services, stack
from pipeline_latency import agent_script, classification, message, prepare, report, stamp_arrivals

from synedre.celeryconfig import GROUPS
from tests.services.claude_api import start_claude_api
from tests.services.llm_server import start_llm_server
from tests.services.smtp import start_smtp

TARGET_MIB = 800
IDLE_AFTER_S = 45
MIB = 2 ** 20
BARE_APP = "from celery import Celery\napp = Celery('bare', broker={broker!r})\n"
PYTHON_TOOLS = ("celery", "synedre", "tasks")


def memory(p: psutil.Process) -> float:
    try:
        info = p.memory_full_info()
        return float(getattr(info, "pss", 0) or info.rss)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return 0.0


def group_of(p: psutil.Process, supervisor: int) -> tuple[str, bool]:
    """(the group it belongs to, whether it is a tool a worker started rather than Python)."""
    chain = [p]
    try:
        while chain[-1].pid != supervisor and (parent := chain[-1].parent()) is not None:
            chain.append(parent)
    except psutil.NoSuchProcess:
        pass
    if p.pid == supervisor:
        return "supervisor", False
    for q in reversed(chain):  # the supervisor's child this process descends from
        if q.pid == supervisor:
            continue
        try:
            argv = q.cmdline()
        except psutil.Error:
            return "gone", False
        name = argv[argv.index("-n") + 1].split("@")[0].rsplit("-", 1)[0] if "-n" in argv else \
            "beat" if "beat" in argv else "idle" if "idle" in argv else "other"
        try:
            tool = not any(t in " ".join(p.cmdline()[:3]) for t in PYTHON_TOOLS)
        except psutil.Error:
            tool = False
        return name, tool
    return "other", False


def postmaster(pg_url: str) -> psutil.Process:
    with psycopg.connect(pg_url) as c:
        data = c.execute("SHOW data_directory").fetchone()[0]
    return psutil.Process(int((Path(data) / "postmaster.pid").read_text().split()[0]))


def sample(supervisor: psutil.Process, pg: psutil.Process | None = None) -> dict[str, float]:
    """MiB per group, plus `tools` (what the workers started) and `total`, at one instant; and,
    apart (not in the total), the PostgreSQL server's processes (`postgres`)."""
    out: dict[str, float] = defaultdict(float)
    if pg is not None:
        try:
            out["postgres"] = sum(memory(p) for p in [pg, *pg.children()]) / MIB
        except psutil.NoSuchProcess:
            pass
    try:
        procs = [supervisor, *supervisor.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for p in procs:
        m = memory(p) / MIB
        group, tool = group_of(p, supervisor.pid)
        out[group] += m
        out["total"] += m
        if tool:
            out["tools"] += m
    out["processes"] = len(procs)
    return out


class Peak(threading.Thread):
    """Samples the fleet twice a second; keeps the sample of the largest total."""

    def __init__(self, supervisor: psutil.Process, pg: psutil.Process):
        super().__init__(daemon=True)
        self.supervisor, self.pg, self.done = supervisor, pg, threading.Event()
        self.peak: dict[str, float] = {}

    def run(self) -> None:
        while not self.done.wait(0.5):
            s = sample(self.supervisor, self.pg)
            if s.get("total", 0) > self.peak.get("total", 0):
                self.peak = dict(s)

    def stop(self) -> dict[str, float]:
        self.done.set()
        self.join(5)
        return self.peak


def line(label: str, s: dict[str, float], bare: float) -> str:
    groups = " ".join(f"{k}={v:.0f}" for k, v in sorted(s.items())
                      if k not in ("total", "processes", "tools", "postgres"))
    return (f"fleet_memory {label} total_mib={s.get('total', 0):.0f} processes={s.get('processes', 0):.0f}"
            f" tools_mib={s.get('tools', 0):.0f} bare_worker_mib={bare:.0f}"
            f" ratio={s.get('total', 0) / bare:.1f} (x one bare worker) {groups}"
            f" postgres_mib={s.get('postgres', 0):.0f} (apart: its server, default settings)")


def bare_worker(env: dict[str, str], logs: Path) -> float:
    """PSS of one Celery worker of an app with no task (solo pool): any worker's floor."""
    app = logs / "bare_app.py"
    app.write_text(BARE_APP.format(broker=env["SYNEDRE_BROKER_URL"]))
    w = stack.Proc("bare", [sys.executable, "-m", "celery", "-A", "bare_app", "worker", "-P", "solo", "-Q", "bare",
                            "--loglevel", "INFO", "-n", "bare@%h", "--without-gossip", "--without-mingle"],
                   {**env, "PYTHONPATH": str(logs)}, logs)
    try:
        w.wait_output(" ready.", 60)
        time.sleep(2)
        return memory(psutil.Process(w.pid)) / MIB
    finally:
        w.end()


def start_fleet(env: dict[str, str], logs: Path) -> stack.Proc:
    """`synedre fleet`, once every worker and the IDLE watcher are up (stopped if they are not:
    a fleet left running on the bench's broker would take the next run's tasks)."""
    fleet = stack.Proc("fleet", [sys.executable, "-m", "synedre.cli", "fleet"], env, logs)

    def ready() -> bool:
        if not fleet.alive():
            raise RuntimeError(f"the fleet exited:\n{fleet.output()[-3000:]}")
        text = fleet.output()
        return text.count(" ready.") >= sum(g.processes for g in GROUPS.values()) and "idle_watching" in text
    try:
        stack.wait_for(ready, 180, "the fleet's workers and IDLE watcher", interval=0.5)
    except BaseException:
        stop(fleet)
        raise
    return fleet


def stop(fleet: stack.Proc) -> None:
    fleet.proc.send_signal(signal.SIGINT)  # Ctrl-C: the supervisor stops its children
    try:
        fleet.proc.wait(60)
    except subprocess.TimeoutExpired:
        pass
    fleet.end()  # whatever of its group is left


def burst(s, n: int) -> float:
    """`n` messages appended at once; the time until each waits at the launch (paused)."""
    imap = s["dovecot"].client()
    started = time.monotonic()
    for i in range(n):
        imap.append("INBOX", message(i, f"burst{os.getpid()}")[0])
    imap.logout()
    with psycopg.connect(s["pg_url"], autocommit=True) as db:
        def held() -> bool:
            n_held = db.execute("SELECT count(*) FROM synedre.email_states WHERE status = 'materialized'"
                                " AND waiting_reason IS NOT NULL").fetchone()[0]
            return n_held >= n
        stack.wait_for(held, 300, f"{n} messages held at the launch", interval=0.5)
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10, help="messages of the pipeline load (one at a time)")
    ap.add_argument("--burst", type=int, default=40, help="messages of the classify load")
    args = ap.parse_args()
    llm, api, smtp = start_llm_server(classification), start_claude_api(agent_script()), start_smtp()
    arrivals = stamp_arrivals(smtp)
    try:
        with services() as s:
            site, env = prepare(s, api, llm, smtp)
            bare = bare_worker(env, s["logs"])
            fleet = start_fleet(env, s["logs"])
            supervisor, pg = psutil.Process(fleet.pid), postmaster(s["pg_url"])
            try:
                time.sleep(IDLE_AFTER_S)
                print(line("idle", sample(supervisor, pg), bare), flush=True)

                peak = Peak(supervisor, pg)
                peak.start()
                report(s, [fleet], api, arrivals, args.n, "agent")
                top = peak.stop()
                print(line(f"pipeline_load messages={args.n}", top, bare), flush=True)

                # launches paused: the burst goes through the stages before the launch, and waits there
                subprocess.run([sys.executable, "-m", "synedre.cli", "spawn", "pause", "--reason", "bench burst"],
                               env=env, cwd=stack.ROOT, check=True, capture_output=True, timeout=60)
                peak = Peak(supervisor, pg)
                peak.start()
                took = burst(s, args.burst)
                classify = peak.stop()
                print(line(f"classify_load messages={args.burst} took_s={took:.1f}", classify, bare), flush=True)
                top = max(top, classify, key=lambda x: x.get("total", 0))
                verdict = "OK" if top.get("total", 0) <= TARGET_MIB else "OVER"
                print(f"fleet_memory under_load_max_mib={top.get('total', 0):.0f} (target <= {TARGET_MIB}) {verdict}"
                      f" loadavg={os.getloadavg()[0]:.1f}", flush=True)
            finally:
                stop(fleet)
                site.stop()
    finally:
        smtp.stop()
        api.stop()
        llm.stop()


if __name__ == "__main__":
    main()
