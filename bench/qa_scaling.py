"""QA of one message's 12 routes on 1, then 2 QA worker processes (`celery -A tasks worker
-Q qa -c 1` each), in the same run: routes/s from `synedre.qa` enqueued to `qa_passed`,
and the ratio of the two. Target: at least 1.6 on 2 cores.

The site is the e2e fixture's (tests/services/site.py) with 12 pages of its own, committed
and published by its deploy script (which writes the sitemap). Each message is prepared
as the deploy stage leaves it (status `deployed`, a launch whose contract declares the 12
routes, its qa_runs row), untimed. Before each measurement an untimed message with 2
routes per worker goes through, so every worker process has imported Playwright and run
Chromium once. Each route's task starts a Chromium of its own: the time one start and stop
takes, measured here in this process, is printed beside the per-route task time so the
share of the browser's start is visible. Runs from a plain shell: see _stack.py, _loop.py.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

import psycopg
from _loop import deployed_message, services, site_with_pages, stack, wait_status

from synedre.pipeline import Status

ROUTES = 12
TIMEOUT_S = 240
WARMUP_ROUTES_PER_WORKER = 2
DONE = {str(Status.QA_PASSED), str(Status.QA_FAILED)}
SUCCEEDED = re.compile(r"Task synedre\.qa_route\[([0-9a-f-]+)\] succeeded in ([0-9.]+)s")


def qa_workers(env: dict[str, str], logs: Path, n: int) -> list[stack.Proc]:
    procs = []
    try:
        for i in range(n):
            argv = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-Q", "qa", "-c", "1",
                    "--loglevel", "INFO", "-n", f"bench-qa-{n}-{i}@%h", "--without-gossip", "--without-mingle"]
            procs.append(stack.Proc(f"bench-qa-{n}-{i}", argv, env, logs))
        for p in procs:
            p.wait_output(" ready.", 90)
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return procs


def browser_start_stop_s(rounds: int = 3) -> float:
    """Median time to start Playwright's driver and Chromium and stop both (what each route's
    task pays before and after its page), in this process."""
    from synedre.orchestrate.qa import Browser

    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        with Browser(30):
            pass
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def route_task_times(workers: list[stack.Proc], skips: list[int]) -> list[float]:
    """The qa_route task durations Celery logged, each worker's first `skips[i]` left out."""
    return [float(m.group(2)) for w, skip in zip(workers, skips, strict=True)
            for m in list(SUCCEEDED.finditer(w.output()))[skip:]]


def through_qa(s, site, routes: list[str], tag: str) -> tuple[float, str]:
    """(seconds from `synedre.qa` enqueued to the verdict, the verdict) for a new message."""
    from tasks.app import app

    mid = deployed_message(s["pg_url"], s["env"]["SYNEDRE_STATE_DIR"], site, routes, tag)
    with psycopg.connect(s["pg_url"], autocommit=True) as db:
        t0 = time.perf_counter()
        app.send_task("synedre.qa", args=[mid])
        status, t1 = wait_status(db, mid, DONE, TIMEOUT_S)
        if status != Status.QA_PASSED:
            checks = db.execute("SELECT c.declared, c.status, c.reasons, c.detail FROM synedre.qa_checks c"
                                " JOIN synedre.qa_runs r ON r.id = c.qa_run_id WHERE r.message_id = %s",
                                (mid,)).fetchall()
            raise RuntimeError(f"message {mid}: {status}, checks {checks}; logs in {s['logs']}")
    return t1 - t0, status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    with services() as s:
        site, routes = site_with_pages(Path(s["env"]["SYNEDRE_STATE_DIR"]).parent / "site", ROUTES)
        env = {**s["env"], "SYNEDRE_QA_TIMEOUT_S": "20"}
        rates = {}
        try:
            browser_s = browser_start_stop_s()
            for n in (1, 2):
                workers = qa_workers(env, s["logs"], n)
                try:
                    through_qa(s, site, routes[:WARMUP_ROUTES_PER_WORKER * n], f"qa-warm{n}")
                    skip = [len(SUCCEEDED.findall(w.output())) for w in workers]
                    elapsed, _ = through_qa(s, site, routes, f"qa{n}")
                    per_task = route_task_times(workers, skip)
                finally:
                    for w in workers:
                        w.stop()
                rates[n] = ROUTES / elapsed
                print(f"qa_scaling routes={ROUTES} workers={n} rate={rates[n]:.2f} routes/s"
                      f" elapsed_s={elapsed:.1f} route_task_mean_s={statistics.mean(per_task):.2f}"
                      f" browser_start_stop_s={browser_s:.2f} loadavg={os.getloadavg()[0]:.1f}", flush=True)
            print(f"qa_scaling ratio={rates[2] / rates[1]:.2f} (target >= 1.6)"
                  f" browser_start_share={browser_s / statistics.mean(per_task):.0%} of a route's task", flush=True)
        finally:
            site.stop()


if __name__ == "__main__":
    main()
