"""The exactly-once claim in PostgreSQL and its fencing token."""
import threading

import psycopg
import pytest
from psycopg.rows import dict_row

from synedre import runner
from synedre.config import Settings
from synedre.db import launches
from synedre.pipeline import LaunchStatus, Status
from synedre.stages.poll import ingest_one
from tests.conftest import CORPUS

pytestmark = pytest.mark.timeout(60)


def classified_message(url, tmp_path, intent="run") -> int:
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    mid = ingest_one(raw, "atlas", 1, 1, Settings(state_dir=tmp_path), lambda _: None)
    with psycopg.connect(url, autocommit=True) as conn:
        run = conn.execute("INSERT INTO synedre.runs (ref_type, ref_id, title, complexity)"
                           " VALUES ('atlas_inbox', %s, 't', 'leger') RETURNING id", (str(mid),)).fetchone()[0]
        conn.execute("UPDATE synedre.email_states SET status = 'materialized', intent = %s,"
                     " complexity = 'leger', run_id = %s WHERE message_id = %s", (intent, run, mid))
    return mid


def connect(url):
    conn = psycopg.connect(url, row_factory=dict_row)
    conn.execute("SET search_path TO synedre, public")
    return conn


def test_twenty_concurrent_claims_give_exactly_one_launch(db, tmp_path):
    mid = classified_message(db, tmp_path)
    claims, barrier = [], threading.Barrier(20)

    def attempt():
        with connect(db) as conn:
            barrier.wait()
            with conn.transaction():
                claims.append(runner.claim_launch(conn, mid, model="sonnet"))
    threads = [threading.Thread(target=attempt) for _ in range(20)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    won = [c for c in claims if c is not None]
    assert len(won) == 1 and won[0].attempt == 1
    with connect(db) as conn:
        assert conn.execute("SELECT count(*) AS n FROM synedre.launches").fetchone()["n"] == 1
        assert launches.selectable(conn) == []


def test_a_superseded_attempt_is_fenced_out(db, tmp_path):
    mid = classified_message(db, tmp_path)
    with connect(db) as conn, conn.transaction():
        first = runner.claim_launch(conn, mid)
    with connect(db) as conn, conn.transaction():  # an operator's retry after the hour
        conn.execute("UPDATE synedre.email_states SET status = 'materialized' WHERE message_id = %s", (mid,))
        conn.execute("UPDATE synedre.audit_log SET at = now() - interval '2 hours' WHERE message_id = %s", (mid,))
        second = runner.claim_launch(conn, mid)
    assert second.attempt == first.attempt + 1
    with connect(db) as conn:
        with pytest.raises(runner.FencedOut):
            with conn.transaction():
                launches.add_events(conn, first, 0, [("assistant", None, "Bash", {"x": 1})])
        with conn.transaction():
            assert launches.add_events(conn, second, 0, [("system", "init", None, {}),
                                                         ("assistant", None, "Bash", {})]) == 2
            runner.finish_launch(conn, second, runner.Done(Status.SPAWNED, "spawn_action_done"),
                                 outcome=LaunchStatus.SUCCEEDED, reason="result", num_turns=3)
        row = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (mid,)).fetchone()
        assert row["status"] == "spawned"
        events = [r["event"] for r in conn.execute(
            "SELECT event FROM synedre.audit_log WHERE message_id = %s ORDER BY id", (mid,))]
        assert events[-1] == "spawn_action_done" and events.count("spawn_started") == 2


def test_selection_skips_noise_and_recently_launched(db, tmp_path):
    mid = classified_message(db, tmp_path, intent="question")
    with connect(db) as conn:
        assert launches.selectable(conn) == [mid]
        with conn.transaction():
            conn.execute("INSERT INTO synedre.audit_log (message_id, event) VALUES (%s, 'spawn_failed')", (mid,))
        assert launches.selectable(conn) == []
        with conn.transaction():
            assert runner.claim_launch(conn, mid) is None


def test_spending_caps_fail_closed(db, tmp_path):
    from synedre.stages.spawn.verdict import over_budget
    mid = classified_message(db, tmp_path)
    caps = Settings(max_message_cost_usd=1.0, daily_spend_cap_usd=3.0)
    with connect(db) as conn:
        assert over_budget(conn, mid, caps) is None
        with conn.transaction():
            conn.execute("INSERT INTO synedre.launches (message_id, attempt, cost_usd) VALUES (%s, 1, 1.5)", (mid,))
        assert "message cost" in str(over_budget(conn, mid, caps))
        assert "fleet spend" in str(over_budget(conn, mid, Settings(max_message_cost_usd=100, daily_spend_cap_usd=1.0)))


def test_a_launch_whose_lock_another_worker_holds_starts_nothing_and_audits_the_holder(db, redis_db, tmp_path):
    from synedre.spawn.locks import MessageLock
    from synedre.stages import spawn

    mid = classified_message(db, tmp_path)
    other = MessageLock(redis_db, str(mid))
    assert other.acquire(60)  # a second worker's launch of the same message, between its lock and its claim
    result = spawn.run(mid)
    assert result == runner.Skip("another worker holds the launch lock")
    with connect(db) as conn:
        assert conn.execute("SELECT count(*) AS n FROM synedre.launches").fetchone()["n"] == 0
        assert conn.execute("SELECT status FROM email_states WHERE message_id = %s", (mid,)).fetchone()["status"] \
            == Status.MATERIALIZED
        audit, = conn.execute("SELECT detail FROM audit_log WHERE message_id = %s"
                              " AND event = 'spawn_skipped_lock_held'", (mid,)).fetchall()
    assert audit["detail"]["holder"] == other.holder()
