"""100,000 stream events persisted the runner's way, next to a raw COPY of the same rows.

The redacted path is synedre/spawn/launcher.py's own, driven directly: the NDJSON bytes of
the stream, in reads of `launcher.READ_SIZE`, go through `Reassembler` (`LineReader`; each delta
stripped to its length; each message's events held until it ends, its text blocks
redacted joined as well; then `Redactor.redact_obj` and `parse_event` on each event),
whose `EventWriter` hands the batches to a writer thread calling `launches.add_events` in
one transaction per call, as synedre/stages/spawn/launch.py's `persist` does. Its rate runs from
the first read to the last row committed. The NDJSON copy the runner also writes is left
out (`ndjson=None`): only the redaction and the database are measured.

The baseline is a `COPY ... FROM STDIN` of the same rows (raw payloads, deltas with their
text, types worked out beforehand) into launch_events for another launch, in one
transaction: the database's own ingestion rate in this run. Target: the redacted rate at
least half of it.

The reader's maximum gap is the longest interval between two successive reads of the
reader loop while persistence runs (what a pty read would wait: that read's redaction
plus any time `add` or the writer thread's hold on the interpreter took); the longest
`add` call alone is printed beside it.

The events are a realistic coding session (tests/orchestrate/transcripts.py: partial
messages, tool calls, long outputs; about 530 bytes an event, more than half of the events
`content_block_delta` partials of 20-90 characters, one assistant event per block as the
CLI writes them), with secrets in some tool outputs, repeated to 100,000. Only an
embedded PostgreSQL is started (under a temporary directory); no Redis.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from tests.orchestrate.transcripts import coding_session  # noqa: E402
from tests.services import stack  # noqa: E402

EVENTS = 100_000
WARMUP = 2_000
SECRETS = ["S3cretPassw0rd-db", "sk-ant-api03-TESTSECRET0123456789abcdef", "envS3cretValue42"]
COLUMNS = "launch_id, seq, event_type, subtype, tool_name, payload"


def stream_events(n: int) -> list[dict]:
    """`n` events: the coding session over and over, a few of its tool outputs carrying secrets."""
    base = coding_session().events
    results = [e for e in base if e["type"] == "user"]
    for i, e in enumerate(results[::8]):  # every 8th tool result prints a secret, as a careless command would
        block = e["message"]["content"][0]
        if isinstance(block.get("content"), str):
            block["content"] += (f"\nDB_PASSWORD={SECRETS[i % 3]}\n"
                                 f"postgresql://app:{SECRETS[0]}@db.internal:5432/app\n")
    return [base[i % len(base)] for i in range(n)]


def ndjson(events: list[dict]) -> bytes:
    return b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in events)


def new_launch(pg_url: str, state_dir: Path, tag: str):
    """A message with a running launch (attempt 1), as the claim leaves it."""
    from synedre.config import Settings
    from synedre.db.launches import LaunchClaim
    from synedre.stages.poll import ingest_one

    raw = (stack.CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    raw = raw.replace(b"Message-ID: <", f"Message-ID: <bench-ev-{tag}.".encode(), 1)
    mid = ingest_one(raw, "atlas", 1, abs(hash(tag)) % 10**9, Settings(state_dir=state_dir), lambda _: None)
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("UPDATE synedre.email_states SET status = 'spawning', launch_attempt = 1 WHERE message_id = %s",
                  (mid,))
        lid = c.execute("INSERT INTO synedre.launches (message_id, attempt, iteration) VALUES (%s, 1, 1)"
                        " RETURNING id", (mid,)).fetchone()[0]
    return LaunchClaim(mid, 1, lid)


def redacted(pg_url: str, state_dir: Path, data: bytes, tag: str) -> dict:
    """On the runner's path: seconds, the reader's max gap and longest `add` (s), rows
    stored, writer calls, and the time each side was busy (reader: reading, redacting and
    parsing; writer: in `add_events` and its commit), and the reader's own CPU time (its busy
    time less what it waited for the interpreter or a core)."""
    from synedre import db
    from synedre.db import launches
    from synedre.redact import Redactor
    from synedre.spawn import launcher
    from synedre.spawn.event_writer import EventWriter
    from synedre.spawn.reassembly import Reassembler

    claim = new_launch(pg_url, state_dir, tag)
    seq, calls, writer_busy = [0], [0], [0.0]

    def persist(batch):  # synedre/stages/spawn/launch.py's callback
        t = time.perf_counter()
        with db.transaction() as conn:
            seq[0] = launches.add_events(conn, claim, seq[0], [
                (e.event_type, e.subtype, e.tool_name, payload) for e, payload in batch])
        calls[0] += 1
        writer_busy[0] += time.perf_counter() - t

    chunks = [data[i:i + launcher.READ_SIZE] for i in range(0, len(data), launcher.READ_SIZE)]
    writer = EventWriter(persist)
    max_add = [0.0]

    def timed_add(pairs):
        t = time.perf_counter()
        writer.add(pairs)
        max_add[0] = max(max_add[0], time.perf_counter() - t)
    stream = Reassembler(Redactor(SECRETS), None, timed_add, None)
    t0 = last = time.perf_counter()
    cpu0 = time.thread_time()
    max_gap = reader_busy = 0.0
    for chunk in chunks:
        now = time.perf_counter()
        max_gap = max(max_gap, now - last)
        last = now
        stream.handle(stream.reader.feed(chunk))
        reader_busy += time.perf_counter() - now
    max_gap = max(max_gap, time.perf_counter() - last)
    stream.handle(stream.reader.close())
    reader_cpu = time.thread_time() - cpu0
    writer.close()  # waits for every row
    elapsed = time.perf_counter() - t0
    if writer.error is not None:
        raise writer.error
    with psycopg.connect(pg_url) as c:
        stored = c.execute("SELECT count(*) FROM synedre.launch_events WHERE launch_id = %s",
                           (claim.launch_id,)).fetchone()[0]
    return {"s": elapsed, "gap_s": max_gap, "add_s": max_add[0], "rows": stored, "calls": calls[0],
            "reader_busy_s": reader_busy, "reader_cpu_s": reader_cpu, "writer_busy_s": writer_busy[0]}


def copied(pg_url: str, state_dir: Path, events: list[dict], tag: str) -> tuple[float, int]:
    """(seconds, rows) of one COPY of the raw rows, built beforehand, in one transaction."""
    from synedre.spawn.stream import StreamParseError, parse_event

    claim = new_launch(pg_url, state_dir, tag)
    rows = []
    for i, e in enumerate(events):
        try:
            ev = parse_event(e)
            kind = (ev.event_type, ev.subtype, ev.tool_name)
        except StreamParseError:
            kind = (e.get("type", "unparsed"), None, None)
        rows.append((claim.launch_id, i, *kind, json.dumps(e, ensure_ascii=False)))
    with psycopg.connect(pg_url) as c:
        t0 = time.perf_counter()
        with c.cursor().copy(f"COPY synedre.launch_events ({COLUMNS}) FROM STDIN") as cp:
            for row in rows:
                cp.write_row(row)
        c.commit()
        elapsed = time.perf_counter() - t0
        stored = c.execute("SELECT count(*) FROM synedre.launch_events WHERE launch_id = %s",
                           (claim.launch_id,)).fetchone()[0]
    return elapsed, stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=EVENTS)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="synedre-bench-events-"))
    pg = None
    try:
        pg = stack.start_pg(base / "pg")
        os.environ.update(SYNEDRE_DATABASE_URL=pg.get_uri(), SYNEDRE_STATE_DIR=str(base / "state"),
                          SYNEDRE_DKIM_KEYS_FILE=str(stack.CORPUS / "dkim-keys.json"))
        from synedre.config import get_settings
        from synedre.db.migrate import upgrade
        from synedre.log import configure

        configure("console", "WARNING")
        get_settings.cache_clear()
        upgrade(get_settings().migrations_dir, pg.get_uri())
        events = stream_events(args.n)
        data = ndjson(events)
        # untimed: imports, the pool's connections, the table's first pages
        copied(pg.get_uri(), base / "state", events[:WARMUP], "warm-copy")
        redacted(pg.get_uri(), base / "state", ndjson(events[:WARMUP]), "warm-redacted")
        copy_s, copy_rows = copied(pg.get_uri(), base / "state", events, "copy")
        r = redacted(pg.get_uri(), base / "state", data, "redacted")
        if (copy_rows, r["rows"]) != (args.n, args.n):
            raise RuntimeError(f"stored {copy_rows} rows by COPY and {r['rows']} redacted, meant {args.n} each")
        red_rate, copy_rate = args.n / r["s"], args.n / copy_s
        print(f"event_persistence events={args.n} redacted_rate={red_rate:.0f} ev/s copy_rate={copy_rate:.0f} ev/s"
              f" ratio={red_rate / copy_rate:.2f} (target >= 0.5) reader_max_gap_ms={r['gap_s'] * 1000:.1f}"
              f" max_add_ms={r['add_s'] * 1000:.2f} redacted_s={r['s']:.1f} copy_s={copy_s:.1f}"
              f" reader_busy_s={r['reader_busy_s']:.1f} reader_cpu_s={r['reader_cpu_s']:.1f}"
              f" writer_busy_s={r['writer_busy_s']:.1f}"
              f" writer_calls={r['calls']} mb={len(data) / 1e6:.1f} loadavg={os.getloadavg()[0]:.1f}", flush=True)
    finally:
        from synedre import db

        if db._pool is not None:  # before the server goes: no connection left to it
            db._pool.close()
        if pg is not None:
            pg.cleanup()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
