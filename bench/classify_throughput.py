"""Messages from `received` to classified/materialized, with a scripted LLM answering after
0 ms and 300 ms, next to a chain of no-op Celery tasks of the same length on the same
workers, measured in the same run.

Targets: at 0 ms, at least half the no-op chain's throughput; at 300 ms, the LLM waits
overlap (achieved concurrency far above 1, throughput far above 1/0.3 s per worker).
"""
from __future__ import annotations

import argparse
import json
import threading
import time

import psycopg
from _stack import corpus_messages, services, stack

from synedre.celeryconfig import GROUPS  # noqa: E402  the fleet's own worker layout

WORKERS = [(",".join(g.queues), g.pool, g.concurrency)
           for name in ("read", "classify") for g in [GROUPS[name]] for _ in range(g.processes)]
ANSWER = json.dumps({"intent": "question", "complexity": "leger", "confidence": 0.9, "rationale": "bench"})


class Script:
    def __init__(self, latency_s: float):
        self.latency_s, self.inflight, self.peak, self._lock = latency_s, 0, 0, threading.Lock()

    def __call__(self, body, path):
        with self._lock:
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
        time.sleep(self.latency_s)
        with self._lock:
            self.inflight -= 1
        return ANSWER


def start_workers(env, logs):
    return [stack.celery_worker({**env, "SYNEDRE_DB_POOL_MAX": str(c + 2)}, logs, queues=q, pool=p,
                                concurrency=c, module=["-m", "celery"]) for q, p, c in WORKERS]


def noop_rate(env, logs, redis, n: int) -> float:
    env = {**env, "PYTHONPATH": str(stack.ROOT / "bench")}
    workers = []
    try:
        for q, p, c in WORKERS:
            workers.append(stack.Proc("noop-worker", [stack.sys.executable, "-m", "celery", "-A", "tasks", "worker",
                                      "-I", "noop_chain", "-Q", q, "-P", p, "-c", str(c), "--loglevel", "INFO",
                                      "-n", f"noop-{q}@%h", "--without-gossip", "--without-mingle"], env, logs))
            workers[-1].wait_output(" ready.", 60)
        import sys
        sys.path.insert(0, str(stack.ROOT / "bench"))
        from noop_chain import noop
        redis.delete("bench:noop:done")
        t0 = time.perf_counter()
        for i in range(n):
            noop.apply_async(args=[i, 0], queue="scan")
        stack.wait_for(lambda: int(redis.get("bench:noop:done") or 0) >= n, 600, "no-op chains", 0.05)
        return n / (time.perf_counter() - t0)
    finally:
        for w in workers:
            w.stop()


def pipeline_rate(s, latency_s: float, n: int) -> tuple[float, int]:
    from synedre.config import Settings
    from synedre.ingest.poll import ingest_one
    from tests.services.llm_server import start_llm_server

    script = Script(latency_s)
    llm = start_llm_server(script)
    env = {**s["env"], "SYNEDRE_MISTRAL_API_KEY": "bench", "SYNEDRE_MISTRAL_SERVER_URL": llm.url}
    with psycopg.connect(s["pg_url"], autocommit=True) as db:
        db.execute("TRUNCATE synedre.audit_log, synedre.attachments, synedre.email_states, synedre.questions,"
                   " synedre.raw_messages RESTART IDENTITY CASCADE")
    settings = Settings(state_dir=s["env"]["SYNEDRE_STATE_DIR"])
    ids = [ingest_one(raw, "atlas", 1, i, settings, lambda _: None)
           for i, raw in enumerate(corpus_messages(n, f"tp{latency_s}", clean=True), start=1)]
    workers = start_workers(env, s["logs"])
    try:
        from tasks.app import app
        t0 = time.perf_counter()
        for mid in ids:
            app.send_task("synedre.scan", args=[mid])
        with psycopg.connect(s["pg_url"], autocommit=True) as db:
            stack.wait_for(lambda: db.execute(
                "SELECT count(*) FROM synedre.audit_log WHERE event IN ('materialized', 'materialize_skipped_noise')"
            ).fetchone()[0] >= n, 1200, f"{n} messages classified", interval=0.1)
        return n / (time.perf_counter() - t0), script.peak
    finally:
        for w in workers:
            w.stop()
        llm.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=2000)
    args = ap.parse_args()
    with services() as s:
        base = noop_rate(s["env"], s["logs"], s["redis"], args.n)
        print(f"no-op chain of 4 Celery tasks: {base:8.1f} messages/s")
        for latency in (0.0, 0.3):
            rate, peak = pipeline_rate(s, latency, args.n)
            line = f"LLM latency {latency * 1000:3.0f} ms: {rate:8.1f} messages/s  ratio to no-op {rate / base:.2f}"
            if latency:
                per_worker = 1 / latency
                line += (f"  achieved concurrency {rate * latency:.1f} (peak in-flight {peak}),"
                         f" {rate / per_worker:.1f}x a serial worker's {per_worker:.1f}/s")
            print(line)


if __name__ == "__main__":
    main()
