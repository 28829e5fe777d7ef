"""Messages from `received` to the end of materialize, with a scripted LLM answering after
0 ms and 300 ms, against a chain of no-op Celery tasks over the same four queues on the
same worker processes, measured in the same run.

The workers have the fleet's layout (synedre.pipeline.WORKER_GROUPS: classify on 12
threads in each of 2 processes) but each classify process gets a database pool of only
2 connections (--pool-max): a stage holds no connection while it waits on the LLM, so
the pool must not bound how many LLM calls are in flight.

Targets: at 0 ms, at least half the no-op chain's throughput (the two alternate in a few
rounds, so a change of load on a shared machine falls on both; each round's ratio is
printed); at 300 ms, the peak number of LLM calls in flight above the pool size. Printed
with it: the pool size each classify process reports for itself, and the most connections
each one held open (pg_stat_activity). Each measurement follows an untimed warm-up batch
(imports, the routing cache, connections). Runs from a plain shell: see _stack.py.
"""
from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import threading
import time

import psycopg
from _stack import corpus_messages, services, stack

from synedre.pipeline import FAILED, TERMINAL, WORKER_GROUPS, Status, group_queues

LAYOUT = [(name, group_queues(name), WORKER_GROUPS[name]) for name in ("read", "classify")]
CLASSIFY = WORKER_GROUPS["classify"]
# No spawn worker runs here, so a message's journey ends at materialized or a terminal status.
DONE = sorted(str(s) for s in TERMINAL | {Status.MATERIALIZED})
FAILURES = sorted(str(s) for s in FAILED)
CHAT = "/v1/chat/completions"
ANSWER = json.dumps({"intent": "question", "complexity": "leger", "confidence": 0.9, "rationale": "bench"})
BENCH_DIR = str(stack.ROOT / "bench")
TIMEOUT_S = 300
BATCHES = itertools.count(1000)


class Script:
    """The LLM: every chat completion answers after `latency_s`, counting calls in flight."""

    def __init__(self):
        self.latency_s, self.inflight, self.peak, self._lock = 0.0, 0, 0, threading.Lock()

    def reset(self, latency_s: float) -> None:
        with self._lock:
            self.latency_s, self.peak = latency_s, self.inflight

    def __call__(self, body, path):
        if path != CHAT:
            return None  # embeddings, if any: the server's instant default
        with self._lock:
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
            latency_s = self.latency_s
        time.sleep(latency_s)
        with self._lock:
            self.inflight -= 1
        return ANSWER


class ConnectionSampler(threading.Thread):
    """The most connections each worker process held open at once (pg_stat_activity,
    processes named by PGAPPNAME)."""

    def __init__(self, pg_url: str):
        super().__init__(daemon=True)
        self.pg_url, self.peak, self.stopping = pg_url, {}, threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.pg_url, autocommit=True) as db:
            while not self.stopping.wait(0.02):
                for app_name, count in db.execute(
                        "SELECT application_name, count(*) FROM pg_stat_activity"
                        " WHERE application_name LIKE 'bench-%' GROUP BY 1").fetchall():
                    self.peak[app_name] = max(self.peak.get(app_name, 0), count)

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)


def start_workers(env: dict[str, str], logs, pool_max: int) -> list[stack.Proc]:
    """The read and classify groups, one Celery process per group process, serving both the
    real stages and the no-op chain; the classify ones with `pool_max` connections."""
    workers = []
    for name, queues, g in LAYOUT:
        for i in range(g.processes):
            proc_env = {**env, "PYTHONPATH": BENCH_DIR, "PGAPPNAME": f"bench-{name}-{i}"}
            if name == "classify":
                proc_env["SYNEDRE_DB_POOL_MAX"] = str(pool_max)
            argv = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-I", "noop_chain,_pool_probe",
                    "-Q", ",".join(queues), "-P", g.pool, "-c", str(g.concurrency), "--loglevel", "INFO",
                    "-n", f"bench-{name}-{i}@%h", "--without-gossip", "--without-mingle"]
            workers.append(stack.Proc(f"bench-{name}-{i}", argv, proc_env, logs))
    try:
        for w in workers:
            w.wait_output(" ready.", 90)
    except BaseException:
        for w in workers:
            w.stop()
        raise
    return workers


def pool_sizes(workers: list[stack.Proc]) -> list[int]:
    """What each classify process says its pool is (bench/_pool_probe.py)."""
    out = []
    for w in workers:
        if "-classify-" in w.name:
            m = stack.wait_for(lambda w=w: re.search(r"bench_pool_probe pid=\d+ max_size=(\d+)", w.output()),
                               30, f"the pool size from {w.name}")
            out.append(int(m.group(1)))
    return out


def timed(run, *args) -> float:
    t0 = time.perf_counter()
    run(*args)
    return time.perf_counter() - t0


def noop_chains(r, first: int, count: int) -> None:
    """`count` no-op chains through the four queues, until the last hop of each has run."""
    from noop_chain import DONE_KEY, noop

    r.delete(DONE_KEY)
    for i in range(first, first + count):
        noop.apply_async(args=[i, 0], queue="scan")
    stack.wait_for(lambda: int(r.get(DONE_KEY) or 0) >= count, TIMEOUT_S, f"{count} no-op chains", 0.05)


class Messages:
    """Bench messages stored at `received` (untimed), then sent through the real stages."""

    def __init__(self, s, count: int):
        from synedre.config import Settings
        from synedre.stages.poll import ingest_one

        settings = Settings(state_dir=s["env"]["SYNEDRE_STATE_DIR"])
        # a UIDVALIDITY of each set's own: the same (mailbox, UID) twice is one delivery
        uidvalidity = next(BATCHES)
        self.ids = [ingest_one(raw, "atlas", uidvalidity, i, settings, lambda _: None)
                    for i, raw in enumerate(corpus_messages(count, f"tp{uidvalidity}", clean=True), start=1)]
        if None in self.ids:
            raise RuntimeError(f"{self.ids.count(None)} bench messages were taken for deliveries already stored")
        self.db = psycopg.connect(s["pg_url"], autocommit=True)

    def through(self, ids: list[int]) -> None:
        """Send `ids` to scan; return once each is through materialize."""
        from tasks.app import app

        for mid in ids:
            app.send_task("synedre.scan", args=[mid])
        stack.wait_for(lambda: self.db.execute(
            "SELECT count(*) FROM synedre.email_states WHERE message_id = ANY(%s) AND status = ANY(%s)",
            (ids, DONE)).fetchone()[0] >= len(ids), TIMEOUT_S, f"{len(ids)} messages through materialize", 0.05)

    def check_none_failed(self, logs) -> None:
        failed = self.db.execute("SELECT status, count(*) FROM synedre.email_states WHERE message_id = ANY(%s)"
                                 " AND status = ANY(%s) GROUP BY 1", (self.ids, FAILURES)).fetchall()
        self.db.close()
        if failed:
            raise RuntimeError(f"bench messages failed: {dict(failed)}; logs in {logs}")


def instant_llm(s, script: Script, n: int, warmup: int, rounds: int) -> tuple[float, float, list[float]]:
    """(pipeline msg/s, no-op chains/s, the ratio of each round) with the LLM answering at
    once. The two alternate in `rounds` slices, so a change of load on the machine falls on
    both rather than on one of them."""
    msgs = Messages(s, warmup + n)
    script.reset(0.0)
    noop_chains(s["redis"], 0, warmup)
    msgs.through(msgs.ids[:warmup])
    slices = [msgs.ids[warmup + n * k // rounds: warmup + n * (k + 1) // rounds] for k in range(rounds)]
    noop_s, pipe_s, first = [], [], warmup
    for ids in slices:
        noop_s.append(timed(noop_chains, s["redis"], first, len(ids)))
        pipe_s.append(timed(msgs.through, ids))
        first += len(ids)
    msgs.check_none_failed(s["logs"])
    return n / sum(pipe_s), n / sum(noop_s), [a / b for a, b in zip(noop_s, pipe_s, strict=True)]


def slow_llm(s, script: Script, latency_s: float, n: int, warmup: int) -> tuple[float, int]:
    """(pipeline msg/s, the most LLM calls in flight at once) with the LLM taking `latency_s`."""
    msgs = Messages(s, warmup + n)
    script.reset(latency_s)
    msgs.through(msgs.ids[:warmup])
    script.reset(latency_s)  # the peak of the measured messages only
    elapsed = timed(msgs.through, msgs.ids[warmup:])
    msgs.check_none_failed(s["logs"])
    return n / elapsed, script.peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=600, help="messages (and no-op chains) per measurement")
    ap.add_argument("--warmup", type=int, default=48, help="untimed messages before each measurement")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of no-op chains and messages at 0 ms")
    ap.add_argument("--pool-max", type=int, default=2, help="SYNEDRE_DB_POOL_MAX of each classify process")
    args = ap.parse_args()
    n, latency = args.n, 0.3
    from tests.services.llm_server import start_llm_server

    sys.path.insert(0, BENCH_DIR)
    script = Script()
    llm = start_llm_server(script)
    with services() as s:
        env = {**s["env"], "SYNEDRE_MISTRAL_API_KEY": "bench", "SYNEDRE_MISTRAL_SERVER_URL": llm.url}
        workers = start_workers(env, s["logs"], args.pool_max)
        sampler = ConnectionSampler(s["pg_url"])
        sampler.start()
        try:
            pools = pool_sizes(workers)
            if pools != [args.pool_max] * CLASSIFY.processes:
                raise RuntimeError(f"classify processes report pools {pools}, meant {args.pool_max} each")
            layout = f"pool_max={args.pool_max} threads={CLASSIFY.concurrency} processes={CLASSIFY.processes}"
            rate0, base, ratios = instant_llm(s, script, n, args.warmup, args.rounds)
            print(f"classify_throughput latency_ms=0 msgs={n} rate={rate0:.1f} msg/s noop_rate={base:.1f}"
                  f" ratio={rate0 / base:.2f} (target >= 0.5) rounds={args.rounds}"
                  f" round_ratios={','.join(f'{x:.2f}' for x in ratios)} {layout}", flush=True)
            rate, peak = slow_llm(s, script, latency, n, args.warmup)
            connections = [sampler.peak.get(f"bench-classify-{i}", 0) for i in range(CLASSIFY.processes)]
            print(f"classify_throughput latency_ms={latency * 1000:.0f} msgs={n} rate={rate:.1f} msg/s {layout}"
                  f" peak_llm_concurrency={peak} (target > pool_max)"
                  f" pool_per_process={','.join(map(str, pools))}"
                  f" peak_db_connections_per_process={','.join(map(str, connections))}"
                  f" mean_llm_concurrency={rate * latency:.1f} warmup={args.warmup}", flush=True)
        finally:
            sampler.stop()
            for w in workers:
                w.stop()
            llm.stop()


if __name__ == "__main__":
    main()
