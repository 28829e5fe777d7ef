"""The sweep finds messages stuck between stages, and only those."""
import psycopg

from synedre.config import Settings
from synedre.stages.poll import ingest_one
from synedre.sweep import find_stuck
from tests.conftest import CORPUS


def test_stuck_messages_are_found_once_per_sweep_and_audited(db, tmp_path):
    settings = Settings(state_dir=tmp_path)
    raws = [p.read_bytes() for p in sorted((CORPUS / "cases").glob("P0[1-4]*.eml"))]
    ids = [ingest_one(raw, "atlas", 1, i, settings, lambda _: None) for i, raw in enumerate(raws, 1)]
    assert find_stuck() == []  # fresh: not stuck yet
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE synedre.email_states SET status_at = now() - interval '1 hour'"
                     " WHERE message_id = %s", (ids[0],))
        conn.execute("UPDATE synedre.email_states SET status = 'scanned', status_at = now() - interval '1 hour'"
                     " WHERE message_id = %s", (ids[1],))
        conn.execute("UPDATE synedre.email_states SET status = 'classified', intent = 'run', complexity = 'leger',"
                     " status_at = now() - interval '1 hour' WHERE message_id = %s", (ids[2],))
        conn.execute("UPDATE synedre.email_states SET status = 'noise', status_at = now() - interval '1 hour'"
                     " WHERE message_id = %s", (ids[3],))
    assert sorted(find_stuck()) == sorted([(ids[0], "scan"), (ids[1], "ocr"), (ids[2], "materialize")])
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM synedre.audit_log WHERE event = 'sweep_requeued'").fetchone()[0] == 3
    assert find_stuck() == []  # once per stage limit: the next sweep does not offer them again


def test_a_claim_whose_worker_died_is_released_and_offered_again(db, tmp_path):
    settings = Settings(state_dir=tmp_path)
    raw = next(sorted((CORPUS / "cases").glob("P01*.eml")).__iter__()).read_bytes()
    mid = ingest_one(raw, "atlas", 1, 1, settings, lambda _: None)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE synedre.email_states SET status = 'classifying', stage_attempt = 4,"
                     " claimed_at = now() - interval '1 hour', status_at = now() WHERE message_id = %s", (mid,))
    assert find_stuck() == [(mid, "classify")]
    with psycopg.connect(db) as conn:
        status, attempt, why = conn.execute("SELECT status, stage_attempt, waiting_reason FROM synedre.email_states"
                                            " WHERE message_id = %s", (mid,)).fetchone()
    assert (status, attempt) == ("read", 4) and "re-offered by the sweep" in why


def test_the_lease_is_the_claim_lease_setting(db, tmp_path, monkeypatch):
    from tests.conftest import _reset_settings

    mid = ingest_one(sorted((CORPUS / "cases").glob("P01*.eml"))[0].read_bytes(), "atlas", 1, 1,
                     Settings(state_dir=tmp_path), lambda _: None)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE synedre.email_states SET status = 'classifying', stage_attempt = 1,"
                     " claimed_at = now() - interval '20 seconds', status_at = now() WHERE message_id = %s", (mid,))
    assert find_stuck() == []  # renewed 20 s ago: alive under the default 40 s lease
    monkeypatch.setenv("SYNEDRE_CLAIM_LEASE_S", "12")
    _reset_settings()
    assert find_stuck() == [(mid, "classify")]  # past a 12 s lease: its worker is taken for dead
