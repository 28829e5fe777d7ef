"""Messages from `received` to the end of materialize, with a scripted LLM answering after
0 ms and 300 ms, against a chain of no-op Celery tasks over the same four queues on the
same worker processes, measured in the same run.

At 0 ms, two kinds of mail: attachment-free (scan and OCR have nothing to do), and mail
carrying two attachments each, a PNG with a line of text (600x100) and a small CSV, which go
through the real clamd (a throwaway one, tests/services/clamd.py: INSTREAM per attachment)
and the real Tesseract (fra+eng, on the image). Both get the no-op chain's rate as their
baseline. The mail with attachments also gets a second one: the same clamd and Tesseract
calls on the same files, made here directly on as many threads as the read group runs
tasks at once (no queue, no database), the work's own floor. After the run the bench checks
that every attachment got a clean verdict and every image's text was read.

The workers have the fleet's layout (synedre.pipeline.WORKER_GROUPS, printed as threads=
and processes=) but each classify process gets a database pool of only 2 connections
(--pool-max): a stage holds no connection while it waits on the LLM, so
the pool must not bound how many LLM calls are in flight.

Targets: at 0 ms without attachments, at least TARGET_RATIO of the no-op chain's throughput
(issue 30 item 3; none is set with attachments: its ratios to the no-op chain and to the
work's floor are printed); at 300 ms, the peak number of LLM calls in flight above the pool
size. At 0 ms the kinds alternate in a few rounds, so a change of load on a shared machine
falls on all; each round's ratios are printed, and each result line ends with the machine's
1-minute load average as it was printed. Printed with it: the pool size each classify
process reports for itself, and the most connections each one held open
(pg_stat_activity). Each measurement follows an untimed warm-up batch (imports, the routing
cache, connections, Tesseract's first start). `--quick`: fewer
messages and rounds. Runs from a plain shell: see _stack.py.
"""
from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import re
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from email import message_from_bytes, policy
from pathlib import Path

import psycopg
from _stack import all_ready, corpus_messages, services, stack

from synedre.pipeline import FAILED, TERMINAL, WORKER_GROUPS, Status, group_queues

LAYOUT = [(name, group_queues(name), WORKER_GROUPS[name]) for name in ("read", "classify")]
CLASSIFY = WORKER_GROUPS["classify"]
READ = WORKER_GROUPS["read"]
# No spawn worker runs here, so a message's journey ends at materialized or a terminal status.
DONE = sorted(str(s) for s in TERMINAL | {Status.MATERIALIZED})
FAILURES = sorted(str(s) for s in FAILED)
CHAT = "/v1/chat/completions"
ANSWER = json.dumps({"intent": "question", "complexity": "leger", "confidence": 0.9, "rationale": "bench"})
BENCH_DIR = str(stack.ROOT / "bench")
TIMEOUT_S = 300
TARGET_RATIO = 0.8  # of the no-op chain's rate, at 0 ms without attachments
BATCHES = itertools.count(1000)
DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")  # apt: fonts-dejavu-core


def attachments(i: int) -> list[tuple[bytes, str, str, str]]:
    """Message i's two files, (bytes, maintype, subtype, filename): a PNG with a line of text
    (what a screenshot of an invoice reads as) and a small CSV."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(str(DEJAVU), 28) if DEJAVU.exists() else ImageFont.load_default(28)
    img = Image.new("RGB", (600, 100), "white")
    ImageDraw.Draw(img).text((20, 30), f"Facture impayée numéro {4000 + i}", font=font, fill="black")
    png = io.BytesIO()
    img.save(png, "PNG")
    csv = "".join(f"{4000 + i},2026-03-{1 + k:02d},{120 + k}.50,EUR\n" for k in range(12)).encode()
    return [(png.getvalue(), "image", "png", f"capture-{i}.png"), (csv, "text", "csv", f"releve-{i}.csv")]


def with_attachments(raw: bytes, i: int) -> bytes:
    """`raw` (a message without attachments) with message i's two files attached."""
    msg = message_from_bytes(raw, policy=policy.SMTP)
    for data, maintype, subtype, filename in attachments(i):
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return msg.as_bytes()


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
    return all_ready(workers, 90)


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
    """Bench messages stored at `received` (untimed), then sent through the real stages;
    `attach`: each with message i's two files (`attachments`)."""

    def __init__(self, s, count: int, attach: bool = False):
        from synedre.config import Settings
        from synedre.stages.poll import ingest_one

        settings = Settings(state_dir=s["env"]["SYNEDRE_STATE_DIR"])
        # a UIDVALIDITY of each set's own: the same (mailbox, UID) twice is one delivery
        uidvalidity = next(BATCHES)
        raws = corpus_messages(count, f"tp{uidvalidity}", clean=True)
        if attach:
            raws = [with_attachments(raw, i) for i, raw in enumerate(raws)]
        self.ids = [ingest_one(raw, "atlas", uidvalidity, i, settings, lambda _: None)
                    for i, raw in enumerate(raws, start=1)]
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
        if failed:
            raise RuntimeError(f"bench messages failed: {dict(failed)}; logs in {logs}")

    def check_scanned_and_read(self, logs) -> float:
        """Every attachment got clamd's clean verdict and every image's text was read (the
        audit's counts); returns the mean characters read per image."""
        verdicts = dict(self.db.execute(
            "SELECT coalesce(verdict, 'none'), count(*) FROM synedre.attachments WHERE message_id = ANY(%s)"
            " GROUP BY 1", (self.ids,)).fetchall())
        ocr = self.db.execute(
            "SELECT (detail->>'images')::int, (detail->>'characters')::int FROM synedre.audit_log"
            " WHERE message_id = ANY(%s) AND event = 'ocr_extracted'", (self.ids,)).fetchall()
        if verdicts != {"clean": 2 * len(self.ids)} or len(ocr) != len(self.ids) \
                or any(images != 1 or not chars for images, chars in ocr):
            raise RuntimeError(f"attachments not all scanned clean and read: verdicts {verdicts}, "
                               f"{len(ocr)} OCR audits, {sum(1 for _, c in ocr if not c)} without text; logs in {logs}")
        return statistics.mean(c for _, c in ocr)

    def close(self) -> None:
        self.db.close()


def work_floor(clamd: str, files: list[list[tuple[bytes, str, str, str]]]) -> None:
    """The attachments' own work, nothing around it: clamd INSTREAM of each file and Tesseract
    on each image, one message per task on as many threads as the read group has processes."""
    from synedre.config import get_settings
    from synedre.ocr.tesseract import ocr_image
    from synedre.scan.clamd import scan_bytes

    s = get_settings()

    def one(parts):
        for data, *_ in parts:
            if scan_bytes(data, clamd, timeout=s.scan_timeout_s).status != "clean":
                raise RuntimeError("clamd did not find a bench attachment clean")
        for data, maintype, *_ in parts:
            if maintype == "image" and not ocr_image(data, s.ocr_languages, timeout=s.ocr_timeout_s):
                raise RuntimeError("Tesseract read nothing on a bench image")
    with ThreadPoolExecutor(READ.concurrency) as pool:
        list(pool.map(one, files))


def slices(ids: list[int], warmup: int, n: int, rounds: int) -> list[list[int]]:
    return [ids[warmup + n * k // rounds: warmup + n * (k + 1) // rounds] for k in range(rounds)]


class Rates:
    """Per kind of work, the (count, seconds) of each round."""

    def __init__(self):
        self.rounds: dict[str, list[tuple[int, float]]] = {}

    def add(self, kind: str, count: int, seconds: float) -> None:
        self.rounds.setdefault(kind, []).append((count, seconds))

    def rate(self, kind: str) -> float:
        """Over all rounds: the messages over the time they took."""
        return sum(c for c, _ in self.rounds[kind]) / sum(t for _, t in self.rounds[kind])

    def round_ratios(self, kind: str, base: str) -> str:
        return ",".join(f"{(c / t) / (bc / bt):.2f}"
                        for (c, t), (bc, bt) in zip(self.rounds[kind], self.rounds[base], strict=True))


def instant_llm(s, script: Script, n: int, n_attach: int, warmup: int, rounds: int) -> tuple[Rates, float]:
    """With the LLM answering at once: the no-op chains, mail without attachments, mail with
    them and the attachments' work floor, alternating in `rounds` slices so that a change of
    load on the machine falls on all rather than on one of them. Returns the rates and the
    mean characters read per image."""
    clean, attach = Messages(s, warmup + n), Messages(s, warmup + n_attach, attach=True)
    script.reset(0.0)
    noop_chains(s["redis"], 0, warmup)
    clean.through(clean.ids[:warmup])
    attach.through(attach.ids[:warmup])
    work_floor(s["clamd"], [attachments(i) for i in range(warmup)])
    rates, first = Rates(), warmup
    for ids, att in zip(slices(clean.ids, warmup, n, rounds), slices(attach.ids, warmup, n_attach, rounds),
                        strict=True):
        rates.add("noop", len(ids), timed(noop_chains, s["redis"], first, len(ids)))
        rates.add("clean", len(ids), timed(clean.through, ids))
        rates.add("attach", len(att), timed(attach.through, att))
        # the same files as those messages carried (attachments(i) for message i)
        files = [attachments(attach.ids.index(mid)) for mid in att]
        rates.add("floor", len(att), timed(work_floor, s["clamd"], files))
        first += len(ids)
    for m in (clean, attach):
        m.check_none_failed(s["logs"])
    chars = attach.check_scanned_and_read(s["logs"])
    clean.close()
    attach.close()
    return rates, chars


def slow_llm(s, script: Script, latency_s: float, n: int, warmup: int) -> tuple[float, int]:
    """(pipeline msg/s, the most LLM calls in flight at once) with the LLM taking `latency_s`."""
    msgs = Messages(s, warmup + n)
    script.reset(latency_s)
    msgs.through(msgs.ids[:warmup])
    script.reset(latency_s)  # the peak of the measured messages only
    elapsed = timed(msgs.through, msgs.ids[warmup:])
    msgs.check_none_failed(s["logs"])
    msgs.close()
    return n / elapsed, script.peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=600, help="messages (and no-op chains) per measurement")
    ap.add_argument("--attach-n", type=int, default=240, help="messages with attachments at 0 ms")
    ap.add_argument("--warmup", type=int, default=48, help="untimed messages before each measurement")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of no-op chains and messages at 0 ms")
    ap.add_argument("--pool-max", type=int, default=2, help="SYNEDRE_DB_POOL_MAX of each classify process")
    ap.add_argument("--quick", action="store_true", help="-n 150 --attach-n 90 --warmup 24 --rounds 3")
    args = ap.parse_args()
    if args.quick:
        args.n, args.attach_n, args.warmup, args.rounds = 150, 90, 24, 3
    latency = 0.3
    from tests.services.clamd import start_clamd
    from tests.services.llm_server import start_llm_server

    sys.path.insert(0, BENCH_DIR)
    script = Script()
    llm = start_llm_server(script)
    clamd = start_clamd()
    try:
        with services() as s:
            s["clamd"] = str(clamd.socket_path)
            env = {**s["env"], "SYNEDRE_MISTRAL_API_KEY": "bench", "SYNEDRE_MISTRAL_SERVER_URL": llm.url,
                   "SYNEDRE_CLAMD": s["clamd"]}
            workers = start_workers(env, s["logs"], args.pool_max)
            sampler = ConnectionSampler(s["pg_url"])
            sampler.start()
            try:
                measure(s, script, workers, sampler, args, latency)
            finally:
                sampler.stop()
                for w in workers:
                    w.stop()
    finally:
        clamd.stop()
        llm.stop()


def load() -> str:
    """The machine's 1-minute load average: a shared machine's other work, next to each result."""
    return f"loadavg={os.getloadavg()[0]:.2f}"


def measure(s, script: Script, workers: list[stack.Proc], sampler: ConnectionSampler, args, latency: float) -> None:
    n = args.n
    pools = pool_sizes(workers)
    if pools != [args.pool_max] * CLASSIFY.processes:
        raise RuntimeError(f"classify processes report pools {pools}, meant {args.pool_max} each")
    layout = f"pool_max={args.pool_max} threads={CLASSIFY.concurrency} processes={CLASSIFY.processes}"
    rates, chars = instant_llm(s, script, n, args.attach_n, args.warmup, args.rounds)
    base = rates.rate("noop")
    print(f"classify_throughput latency_ms=0 attachments=none msgs={n} rate={rates.rate('clean'):.1f} msg/s"
          f" noop_rate={base:.1f} ratio={rates.rate('clean') / base:.2f} (target >= {TARGET_RATIO})"
          f" rounds={args.rounds} round_ratios={rates.round_ratios('clean', 'noop')} {layout} {load()}", flush=True)
    print(f"classify_throughput latency_ms=0 attachments=png+csv msgs={args.attach_n}"
          f" rate={rates.rate('attach'):.1f} msg/s noop_rate={base:.1f} ratio={rates.rate('attach') / base:.2f}"
          f" (no target) round_ratios={rates.round_ratios('attach', 'noop')}"
          f" work_floor_rate={rates.rate('floor'):.1f} msg/s"
          f" ratio_to_floor={rates.rate('attach') / rates.rate('floor'):.2f}"
          f" round_ratios_to_floor={rates.round_ratios('attach', 'floor')}"
          f" (clamd x2 + tesseract {READ.concurrency} at a time) ocr_chars_mean={chars:.0f} {load()}", flush=True)
    rate, peak = slow_llm(s, script, latency, n, args.warmup)
    connections = [sampler.peak.get(f"bench-classify-{i}", 0) for i in range(CLASSIFY.processes)]
    print(f"classify_throughput latency_ms={latency * 1000:.0f} attachments=none msgs={n} rate={rate:.1f} msg/s"
          f" {layout} peak_llm_concurrency={peak} ratio_to_pool_max={peak / args.pool_max:.1f} (target > 1)"
          f" pool_per_process={','.join(map(str, pools))}"
          f" peak_db_connections_per_process={','.join(map(str, connections))}"
          f" mean_llm_concurrency={rate * latency:.1f} warmup={args.warmup} {load()}", flush=True)


if __name__ == "__main__":
    main()
