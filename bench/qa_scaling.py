"""QA of one message's 12 routes on 1 and on 2 QA worker processes (`celery -A tasks worker
-Q qa -c 1` each), alternated in the same run (1, 2, 1, 2, ... over `--rounds` rounds, so a
change of load on a shared machine falls on both): routes/s from `synedre.qa` enqueued to
`qa_passed`, the median of each over the rounds, and the ratio of the medians (the baseline
is 1 worker). Target: at least 1.8 on 2 cores.

Both worker processes run for the whole bench; in a 1-worker round the second one has
stopped consuming the `qa` queue (Celery's `cancel_consumer`, `add_consumer` before a
2-worker round), and the bench checks from the workers' logs that it ran no route then.
The site is the e2e fixture's (tests/services/site.py) with 12 pages of its own, committed
and published by its deploy script (which writes the sitemap). Each message is prepared as
the deploy stage leaves it (status `deployed`, a launch whose contract declares the 12
routes, its qa_runs row), untimed. Before the rounds an untimed message with 2 routes per
worker goes through both, so every worker process has imported Playwright and started its
Chromium. Each worker's child keeps that one Chromium (tasks/qa.py, `keep`; closed after
browser_thread.IDLE_S without a check, longer than a round) and one page in it, which every
route's check reuses and clears after (browser.py, `_Tab`): what a route's task pays for
its browser is that clearing, not a Chromium's start nor a new page.
Measured here in this process and printed beside the per-route task time: a Chromium's start
and stop (paid once per worker child), a new context and page opened and closed (what each
check paid before the page was reused), and one clearing of the reused page, with its share
of a route's task. Runs from a plain shell: see _stack.py, _loop.py.
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
from _stack import all_ready

from synedre.pipeline import Status

ROUTES = 12
TIMEOUT_S = 240
WARMUP_ROUTES_PER_WORKER = 2
WORKERS = 2
DONE = {str(Status.QA_PASSED), str(Status.QA_FAILED)}
SUCCEEDED = re.compile(r"Task synedre\.qa_route\[([0-9a-f-]+)\] succeeded in ([0-9.]+)s")


def node(i: int) -> str:
    return f"bench-qa-{i}@bench"


def qa_workers(env: dict[str, str], logs: Path, n: int) -> list[stack.Proc]:
    procs = []
    for i in range(n):
        argv = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-Q", "qa", "-c", "1",
                "--loglevel", "INFO", "-n", node(i), "--without-gossip", "--without-mingle"]
        procs.append(stack.Proc(f"bench-qa-{i}", argv, env, logs))
    return all_ready(procs, 90)


def consuming(workers: int) -> None:
    """Only the first `workers` worker processes consume the `qa` queue; the others, idle,
    stay up. Returns once each one concerned has answered."""
    from tasks.app import app

    for i in range(WORKERS):
        command = app.control.add_consumer if i < workers else app.control.cancel_consumer
        replies = command("qa", destination=[node(i)], reply=True, timeout=10)
        if not replies:
            raise RuntimeError(f"{node(i)} did not answer {command.__name__}")


def browser_costs_s(url: str, rounds: int = 3) -> tuple[float, float, float]:
    """Medians, in this process: Playwright's driver and Chromium started and stopped (once per
    worker child); a new context and page opened and closed; the reused page cleared after a
    check of `url` (what each route's task pays)."""
    from synedre.orchestrate.browser import Browser

    start, new_page, clear = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        with Browser(30):
            pass
        start.append(time.perf_counter() - t0)
    with Browser(30) as b:
        for _ in range(rounds):
            t0 = time.perf_counter()
            ctx = b.new_context()
            ctx.new_page()
            ctx.close()
            new_page.append(time.perf_counter() - t0)
        for _ in range(rounds + 1):
            with b.page() as page:
                page.goto(url)
                t0 = time.perf_counter()
            clear.append(time.perf_counter() - t0)
    return statistics.median(start), statistics.median(new_page), statistics.median(clear[1:])


def route_task_times(workers: list[stack.Proc]) -> list[list[float]]:
    """The qa_route task durations Celery logged so far, per worker."""
    return [[float(m.group(2)) for m in SUCCEEDED.finditer(w.output())] for w in workers]


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


def logged(workers: list[stack.Proc], total: int) -> list[list[float]]:
    """The route task times once `total` tasks in all have logged their end (the last route
    writes the verdict, then its task returns and Celery logs it: the log trails the verdict)."""
    stack.wait_for(lambda: sum(map(len, route_task_times(workers))) >= total, 30, f"{total} route tasks logged")
    return route_task_times(workers)


def one_round(s, site, routes: list[str], workers: list[stack.Proc], n: int, tag: str) -> tuple[float, list[float]]:
    """(routes/s, the route task times) of one message on the first `n` workers."""
    consuming(n)
    before = route_task_times(workers)
    elapsed, _ = through_qa(s, site, routes, tag)
    after = logged(workers, sum(map(len, before)) + len(routes))
    ran = [len(a) - len(b) for a, b in zip(after, before, strict=True)]
    if any(ran[n:]) or sum(ran) != len(routes):
        raise RuntimeError(f"{n} worker(s) meant to run the {len(routes)} routes, per worker: {ran}")
    return len(routes) / elapsed, [t for a, b in zip(after, before, strict=True) for t in a[len(b):]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (1 worker, 2 workers)")
    args = ap.parse_args()
    with services() as s:
        site, routes = site_with_pages(Path(s["env"]["SYNEDRE_STATE_DIR"]).parent / "site", ROUTES)
        env = {**s["env"], "SYNEDRE_QA_TIMEOUT_S": "20"}
        rates: dict[int, list[float]] = {1: [], 2: []}
        tasks: dict[int, list[float]] = {1: [], 2: []}
        try:
            browser_s, new_page_s, clear_s = browser_costs_s(site.url + routes[0])
            workers = qa_workers(env, s["logs"], WORKERS)
            try:
                consuming(WORKERS)
                through_qa(s, site, routes[:WARMUP_ROUTES_PER_WORKER * WORKERS], "qa-warm")
                logged(workers, WARMUP_ROUTES_PER_WORKER * WORKERS)
                for r in range(args.rounds):
                    for n in (1, 2):
                        rate, times = one_round(s, site, routes, workers, n, f"qa{n}-{r}")
                        rates[n].append(rate)
                        tasks[n].extend(times)
            finally:
                for w in workers:
                    w.stop()
            for n in (1, 2):
                print(f"qa_scaling routes={ROUTES} workers={n} rounds={args.rounds}"
                      f" rate_p50={statistics.median(rates[n]):.2f} routes/s"
                      f" rates={','.join(f'{x:.2f}' for x in rates[n])}"
                      f" route_task_mean_s={statistics.mean(tasks[n]):.2f}"
                      f" browser_start_stop_s={browser_s:.2f} new_page_s={new_page_s:.2f}"
                      f" page_clear_s={clear_s:.2f}", flush=True)
            ratio = statistics.median(rates[2]) / statistics.median(rates[1])
            print(f"qa_scaling ratio={ratio:.2f} (medians, 2 workers over the 1-worker baseline; target >= 1.8)"
                  f" round_ratios={','.join(f'{b / a:.2f}' for a, b in zip(rates[1], rates[2], strict=True))}"
                  f" page_clear_share={clear_s / statistics.mean(tasks[1] + tasks[2]):.0%} of a route's task"
                  f" loadavg={os.getloadavg()[0]:.1f}", flush=True)
        finally:
            site.stop()


if __name__ == "__main__":
    main()
