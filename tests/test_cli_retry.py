"""`synedre retry` tells the truth (issue 19): a move committed while Redis is down is said,
exit 0, and the sweep enqueues it once Redis is back; a batch goes on past one failure;
usage is refused before the database is touched; a message already at its stage's entry
status is only enqueued again."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from synedre.pipeline import BY_NAME
from tests.services import stack
from tests.services._process import free_port

pytestmark = pytest.mark.timeout(180)


def message_at(url: str, status: str, n: int) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        mid = conn.execute("INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, subject, raw,"
                           " size) VALUES ('atlas', 1, %s, %s, 'Devis', 'x', 1) RETURNING id",
                           (n, f"<r{n}@example.fr>")).fetchone()[0]
        conn.execute("INSERT INTO synedre.email_states (message_id, status) VALUES (%s, 'received')", (mid,))
        conn.execute("UPDATE synedre.email_states SET status = %s WHERE message_id = %s", (status, mid))
    return mid


def state(url: str, mid: int) -> dict:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status, waiting_reason, status_at FROM synedre.email_states WHERE message_id = %s",
                           (mid,)).fetchone()
        events = [r[0] for r in conn.execute("SELECT event FROM synedre.audit_log WHERE message_id = %s ORDER BY id",
                                             (mid,))]
    return {"status": row[0], "waiting": row[1], "status_at": row[2], "events": events}


def retry(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synedre.cli", "retry", *argv], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=stack.ROOT, timeout=60)


def queued(r, queue: str) -> list[tuple[str, str]]:
    """(task name, its arguments) of each task waiting in `queue`."""
    return [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in map(json.loads, r.lrange(queue, 0, -1))]


def test_retry_with_redis_down_says_the_enqueue_is_pending_and_the_sweep_enqueues_it_once_redis_is_back(
        db, redis_db, monkeypatch):
    mid = message_at(db, "classify_failed", 1)
    out = retry(str(mid), "--reason", "key set", SYNEDRE_BROKER_URL=f"redis://127.0.0.1:{free_port()}/13")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"message {mid}: classify_failed -> read; enqueue pending: Redis (127.0.0.1:")
    assert "The sweep enqueues it for classify once Redis answers" in " ".join(out.stdout.split())
    assert "Traceback" not in out.stdout + out.stderr
    moved = state(db, mid)
    assert moved["status"] == "read" and moved["events"] == ["retry_requested"]
    assert moved["waiting"].startswith("enqueue pending: Redis")  # what `synedre inspect` shows

    # Redis is back (the test's database 13, which kept its epoch: not a broker loss), and
    # the stage's limit has passed since the move: the sweep hands the message on.
    from synedre import sweep as sweep_core
    from tasks.sweep import sweep

    redis_db.set(sweep_core.EPOCH_KEY, "1")
    assert queued(redis_db, "classify") == []
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE synedre.email_states SET status_at = now() - make_interval(secs => %s)"
                     " WHERE message_id = %s", (BY_NAME["classify"].stuck_after_s + 1, mid))
    sweep()
    assert queued(redis_db, "classify") == [("synedre.classify", f"[{mid}]")]
    assert state(db, mid)["events"] == ["retry_requested", "sweep_requeued"]


def test_a_batch_goes_on_past_a_message_that_fails_and_reports_each(db, redis_db):
    mids = [message_at(db, "classify_failed", n) for n in (1, 2, 3)]
    with psycopg.connect(db) as locker:  # the second message's row is locked by someone else
        locker.execute("SELECT 1 FROM synedre.email_states WHERE message_id = %s FOR UPDATE", (mids[1],))
        out = retry("--status", "classify_failed", "--reason", "key set", PGOPTIONS="-c lock_timeout=1000")
    assert out.returncode == 0, out.stderr
    for mid in (mids[0], mids[2]):
        assert f"message {mid}: classify_failed -> read, enqueued for classify" in out.stdout
        assert state(db, mid)["status"] == "read"
    assert out.stderr.startswith(f"failed: message {mids[1]}: LockNotAvailable"), out.stderr
    assert state(db, mids[1]) | {"status_at": None} == {"status": "classify_failed", "waiting": None,
                                                       "status_at": None, "events": []}
    assert sorted(queued(redis_db, "classify")) == sorted(("synedre.classify", f"[{m}]") for m in (mids[0], mids[2]))


def test_usage_is_refused_before_the_database_is_touched():
    nowhere = {"SYNEDRE_DATABASE_URL": f"postgresql://synedre@127.0.0.1:{free_port()}/synedre",
               "SYNEDRE_DB_TIMEOUT_S": "30"}
    for argv, said in ((["1", "--from", "bogus"], "--from 'bogus' is not a stage (stages: scan, ocr,"),
                       (["--status", "bogus"], "Invalid value for '--status'"),
                       (["--status", "classify_failed", "--since", "soon"], "--since 'soon': give 30m"),
                       (["1", "--status", "read"], "give a MESSAGE or --status STATUS")):
        out = retry(*argv, "--reason", "r", **nowhere)
        assert out.returncode == 2 and said in out.stderr, (argv, out.stderr)
        assert "PostgreSQL" not in out.stderr


def test_a_message_already_at_its_entry_status_is_only_enqueued_again(db, redis_db):
    mid = message_at(db, "received", 1)
    before = state(db, mid)
    out = retry(str(mid), "--reason", "its task was lost")
    assert out.returncode == 0 and out.stdout == f"message {mid}: already at received, enqueued for scan\n"
    after = state(db, mid)
    assert after["status"] == "received" and after["status_at"] == before["status_at"]
    assert after["events"] == ["retry_requeued"]  # not a `received -> received` move
    assert queued(redis_db, "scan") == [("synedre.scan", f"[{mid}]")]


def test_an_escalated_message_is_not_said_to_have_succeeded(db, redis_db):
    mid = message_at(db, "escalated", 1)
    out = retry(str(mid), "--from", "spawn", "--reason", "again")
    assert out.returncode == 1 and "spawn is re-entered only from spawn_failed" in out.stderr
    assert "succeeded" not in out.stderr and state(db, mid)["status"] == "escalated"
