"""No event is dropped when the database is slower than the stream (issue 16, item 5).

A real child process streams a launch's events through `launcher.run`; the launch's
event table is locked by another session until the writer, still blocked once the stream
has ended, says it is slow: every insert waits past the writer's slow-log period. The run
must end with every event stored, in order, once.
"""
from __future__ import annotations

import gc
import json
import sys
import threading
import time

import psycopg
import pytest

from synedre import db as database, runner
from synedre.db import launches
from synedre.redact import Redactor
from synedre.spawn import event_writer, launcher
from tests.spawn.test_split_secrets import init, result

EVENTS = 400
HOLD_S = 30.0  # the longest the table is held: released once the writer said it is slow


def _script(tmp_path) -> list[str]:
    lines = [init()] + [{"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01Backlog", "content": f"line {n}"}]},
        "session_id": "s", "uuid": f"u{n}"} for n in range(EVENTS)] + [result()]
    feed = tmp_path / "stream.ndjson"
    feed.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return [sys.executable, "-c", f"import sys; sys.stdout.write(open({str(feed)!r}).read()); sys.stdout.flush()"]


def hear(monkeypatch, slow: threading.Event) -> list[str]:
    """The writer's warnings, heard (their events, in order); `slow` set once it says it is slow."""
    said: list[str] = []
    real = event_writer.log

    class Heard:
        def __getattr__(self, name):
            return getattr(real, name)

        def warning(self, event, **kw):
            said.append(event)
            if event == "spawn_events_writer_slow":
                slow.set()
            return real.warning(event, **kw)
    monkeypatch.setattr(event_writer, "log", Heard())
    return said


@pytest.mark.timeout(30)
def test_closing_behind_a_full_queue_says_it_is_slow_and_loses_nothing(monkeypatch):
    """The stream ended while the writer is stuck and its queue full: `close` waits to hand
    over the rest, saying so every WRITER_SLOW_S, never silently (nor dropping it)."""
    monkeypatch.setattr(event_writer, "WRITER_SLOW_S", 0.2)
    slow, writing, stored = threading.Event(), threading.Event(), []
    said = hear(monkeypatch, slow)

    def stuck(batch):  # the database, held until the writer says it is slow
        writing.set()
        assert slow.wait(10)
        stored.extend(n for n, _ in batch)
    writer = event_writer.EventWriter(stuck)
    n = event_writer.QUEUE_BATCHES + 3  # one being written, a full queue, and more pending
    writer.add([(0, {"n": 0})])
    assert writing.wait(5)  # the first batch is in the stuck write: the next ones fill the queue
    for i in range(1, n):
        writer.add([(i, {"n": i})])
    closing = threading.Thread(target=writer.close)
    closing.start()
    closing.join(10)
    assert not closing.is_alive() and "spawn_events_writer_slow" in said
    assert stored == list(range(n)) and writer.error is None and writer.unsaved == 0


@pytest.mark.timeout(120)
def test_a_database_held_back_past_the_writer_timeout_loses_no_event(db, tmp_path, monkeypatch):
    from tests.spawn.test_launch_claim import classified_message, connect

    monkeypatch.setattr(event_writer, "WRITER_SLOW_S", 0.5)  # the old code gave up after this long
    locked, release = threading.Event(), threading.Event()
    said = hear(monkeypatch, release)  # the table is released once the writer said it is slow
    mid = classified_message(db, tmp_path)
    with connect(db) as conn, conn.transaction():
        claim = runner.claim_launch(conn, mid, model="sonnet")
    assert claim is not None
    seq = [0]

    def persist(batch):  # synedre/stages/spawn/launch.py's callback
        with database.transaction() as conn:
            seq[0] = launches.add_events(conn, claim, seq[0], [
                (e.event_type, e.subtype, e.tool_name, payload) for e, payload in batch])

    def hold() -> None:  # another session holds the table: every insert waits behind it
        with psycopg.connect(db) as c, c.transaction():
            c.execute("LOCK TABLE synedre.launch_events IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(HOLD_S)

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(10)
    started = time.monotonic()
    try:
        outcome = launcher.run(_script(tmp_path), cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                               limits=launcher.Limits(idle_timeout_s=30, hard_timeout_s=60, budget_s=60),
                               redactor=Redactor([]), on_events=persist, ndjson_path=tmp_path / "events.ndjson")
    finally:
        release.set()
        holder.join(10)
    waited = time.monotonic() - started
    assert outcome.error is None and outcome.stop_reason == "result" and outcome.events == EVENTS + 2
    assert "spawn_events_writer_slow" in said and waited < HOLD_S  # the run waited for the database, and said so
    with psycopg.connect(db) as c:
        rows = c.execute("SELECT seq, payload FROM synedre.launch_events WHERE launch_id = %s ORDER BY seq",
                         (claim.launch_id,)).fetchall()
    assert [s for s, _ in rows] == list(range(EVENTS + 2)) and seq[0] == EVENTS + 2
    assert [p.get("uuid") for _, p in rows[1:-1]] == [f"u{n}" for n in range(EVENTS)]
    assert rows[0][1]["type"] == "system" and rows[-1][1]["type"] == "result"


@pytest.mark.timeout(60)
def test_a_failed_write_is_tried_again_and_the_events_all_arrive(monkeypatch):
    monkeypatch.setattr(event_writer, "WRITE_BACKOFF_S", 0.01)
    stored: list[int] = []
    failures = [2]

    def flaky(batch):
        if failures[0]:
            failures[0] -= 1
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        stored.extend(n for n, _ in batch)

    writer = event_writer.EventWriter(flaky)
    for n in range(50):
        writer.add([(n, {})])  # type: ignore[list-item]
    writer.close()
    assert writer.error is None and writer.unsaved == 0 and stored == list(range(50))


@pytest.mark.timeout(60)
def test_a_write_that_keeps_failing_ends_the_launch_and_counts_what_was_not_stored(monkeypatch, capsys):
    monkeypatch.setattr(event_writer, "WRITE_BACKOFF_S", 0.01)

    def down(batch):
        raise psycopg.OperationalError("connection refused")

    writer = event_writer.EventWriter(down)
    for n in range(20):
        writer.add([(n, {})])  # type: ignore[list-item]
    writer.close()
    assert isinstance(writer.error, psycopg.OperationalError) and writer.unsaved == 20
    said = capsys.readouterr()  # stdout or stderr: whichever an earlier test left structlog printing to
    assert "spawn_events_unsaved" in said.out + said.err


@pytest.mark.timeout(30)
def test_a_backlog_is_kept_out_of_the_collector_s_scans_until_the_writer_closes():
    """A full collection scans whatever the collector tracks, in the reader's thread: what the
    writer started with, and a backlog behind a slow database, are frozen out of its sight
    (a read no longer waits on a scan of them), and all given back at `close`."""
    gc.unfreeze()
    release, writing, stored = threading.Event(), threading.Event(), []

    def stuck(batch):
        writing.set()
        assert release.wait(10)
        stored.extend(n for n, _ in batch)
    writer = event_writer.EventWriter(stuck)
    assert gc.get_freeze_count() > 0  # the process as it stood
    writer.add([(0, {"n": [0]})])
    assert writing.wait(5)
    queued = [(n, {"n": [n]}) for n in range(1, event_writer.QUEUE_BATCHES + 1)]
    for pair in queued:
        writer.add([pair])  # room in the queue: handed over, nothing frozen for them
    backlog = [(n, {"n": [n]}) for n in range(len(queued) + 1, len(queued) + 50)]
    scanned = {id(o) for o in gc.get_objects()}
    assert all(id(p) in scanned for _, p in queued + backlog)
    writer.add(backlog)  # the queue is full: a backlog
    scanned = {id(o) for o in gc.get_objects()}
    assert not any(id(p) in scanned or id(p["n"]) in scanned for _, p in backlog)
    release.set()
    writer.close()
    assert stored == list(range(len(queued) + len(backlog) + 1)) and gc.get_freeze_count() == 0


@pytest.mark.timeout(30)
def test_a_process_frozen_before_the_writer_keeps_its_freeze_and_gets_no_other():
    """A worker froze what its pool's children share (tasks/_common.py): the writer neither
    gives that back to the collector at `close` nor freezes a launch's objects for good."""
    gc.unfreeze()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        release, stored = threading.Event(), []

        def slow(batch):
            assert release.wait(10)
            stored.extend(n for n, _ in batch)
        writer = event_writer.EventWriter(slow)
        backlog = [(n, {"n": [n]}) for n in range(event_writer.QUEUE_BATCHES + 20)]
        for pair in backlog:
            writer.add([pair])  # the queue fills: a backlog, which stays in the collector's sight
        scanned = {id(o) for o in gc.get_objects()}
        assert all(id(p) in scanned for _, p in backlog[event_writer.QUEUE_BATCHES + 1:])
        assert gc.get_freeze_count() == frozen
        release.set()
        writer.close()
        assert stored == list(range(len(backlog))) and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
