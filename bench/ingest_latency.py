"""APPEND -> state row `received`, one message at a time, with the IDLE watcher running.

Prints p50/p95 in ms, the same for the IMAP server's own IDLE notification (the baseline:
the floor, measured in this run on a bare IDLE connection before the worker starts), the
ratios of the two, and the ratio to a one-minute poll. Target: p95 below 1 s.
"""
from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from _stack import IdleFloor, corpus_messages, services, stack

POLL_INTERVAL_S = 60.0


def pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def idle_floor(dovecot, messages: list[bytes]) -> list[float]:
    """Latency from APPEND to the server's EXISTS on an IDLE connection (INBOX emptied after)."""
    floor = IdleFloor(dovecot)
    try:
        for raw in messages:
            floor.sample(raw)
    finally:
        floor.close()
    return floor.samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=200)
    args = ap.parse_args()
    with services() as s:
        floor = idle_floor(s["dovecot"], corpus_messages(20, "floor"))
        procs, latencies = [], []
        try:
            procs.append(stack.celery_worker(s["env"], s["logs"]))
            procs.append(stack.idle_watcher(s["env"], s["logs"]))
            with s["dovecot"].client() as imap, psycopg.connect(s["pg_url"], autocommit=True) as db:
                for i, raw in enumerate(corpus_messages(args.n, "lat")):
                    mid = f"<bench-lat-{i}@synedre.test>"
                    t0 = time.perf_counter()
                    imap.append("INBOX", raw)
                    stack.wait_for(lambda: db.execute(
                        "SELECT 1 FROM synedre.raw_messages r JOIN synedre.email_states s "
                        "ON s.message_id = r.id WHERE r.message_id = %s", (mid,)).fetchone(),  # noqa: B023 (waited on here)
                        30, f"message {i}", interval=0.002)
                    latencies.append(time.perf_counter() - t0)
        finally:
            for p in procs:
                p.stop()
    ms = lambda v: v * 1000  # noqa: E731
    p50, p95 = pct(latencies, 50), pct(latencies, 95)
    print(f"messages: {len(latencies)}")
    print(f"APPEND -> received  p50 {ms(p50):7.1f} ms   p95 {ms(p95):7.1f} ms   max {ms(max(latencies)):7.1f} ms")
    print(f"IMAP IDLE floor     p50 {ms(pct(floor, 50)):7.1f} ms   p95 {ms(pct(floor, 95)):7.1f} ms"
          "   (the server's own notification delay)")
    print(f"pipeline overhead over the floor at p95: {ms(p95 - pct(floor, 95)):.1f} ms")
    print(f"ratio to the IDLE floor: p50 {p50 / pct(floor, 50):.2f}   p95 {p95 / pct(floor, 95):.2f}")
    print(f"ratio to a one-minute poll: mean wait {POLL_INTERVAL_S / 2:.0f} s -> "
          f"{statistics.mean(latencies) / (POLL_INTERVAL_S / 2):.4f}; worst {POLL_INTERVAL_S:.0f} s -> "
          f"p95 {p95 / POLL_INTERVAL_S:.4f}")
    print(f"target p95 < 1000 ms: {'PASS' if p95 < 1.0 else 'FAIL'}")


if __name__ == "__main__":
    main()
