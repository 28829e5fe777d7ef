"""Drain a backlog: N messages waiting in the mailbox, then the ingest worker starts.

Prints messages/s from the first poll to the last `received` row and the peak RSS of
the worker processes, at a small backlog (the baseline, same run) and at the full one,
with the ratios: throughput should hold (linear time) and memory stay flat.
"""
from __future__ import annotations

import argparse
import threading
import time

import psutil
import psycopg
from _stack import corpus_messages, services, stack


def rss_tree(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.NoSuchProcess:
        return 0


def drain(n: int) -> tuple[float, int]:
    with services() as s:
        with s["dovecot"].client() as imap:
            for raw in corpus_messages(n, f"backlog{n}"):
                imap.append("INBOX", raw)
        worker = stack.celery_worker(s["env"], s["logs"])
        peak, stop = [rss_tree(worker.pid)], threading.Event()

        def sample():
            while not stop.wait(0.05):
                peak.append(rss_tree(worker.pid))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            from tasks.app import app
            t0 = time.perf_counter()
            app.send_task("synedre.poll", args=["atlas"])
            with psycopg.connect(s["pg_url"], autocommit=True) as db:
                stack.wait_for(lambda: db.execute(
                    "SELECT count(*) FROM synedre.email_states WHERE status = 'received'"
                ).fetchone()[0] >= n, 1800, f"{n} messages received", interval=0.1)
            elapsed = time.perf_counter() - t0
        finally:
            stop.set()
            sampler.join()
            worker.stop()
        return n / elapsed, max(peak)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--baseline", type=int, default=1000)
    ap.add_argument("-n", type=int, default=5000)
    args = ap.parse_args()
    results = {n: drain(n) for n in (args.baseline, args.n)}
    mib = 1024 * 1024
    for n, (rate, rss) in results.items():
        print(f"{n:6d} messages: {rate:7.1f} messages/s   peak worker RSS {rss / mib:7.1f} MiB")
    (r0, m0), (r1, m1) = results[args.baseline], results[args.n]
    print(f"throughput ratio {args.n}/{args.baseline}: {r1 / r0:.2f} (1.0 = linear drain time)")
    print(f"peak RSS ratio   {args.n}/{args.baseline}: {m1 / m0:.2f} (1.0 = flat memory)")


if __name__ == "__main__":
    main()
