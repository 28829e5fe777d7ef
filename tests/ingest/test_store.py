"""Storing one delivery: exactly once, bad input kept raw with a clear status."""
import stat
from pathlib import Path

import psycopg

from synedre.config import Settings
from synedre.ingest.mime import Reason
from synedre.stages.poll import ingest_one
from tests.conftest import CORPUS


def rows(url, sql, *args):
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


def test_oversized_message_is_stored_raw_as_parse_failed_and_not_handed_on(db, tmp_path):
    settings = Settings(max_message_bytes=1000, state_dir=tmp_path)
    raw = b"From: a@b.c\r\nMessage-ID: <big@x>\r\nSubject: big\r\n\r\n" + b"x" * 5000
    enqueued = []
    mid = ingest_one(raw, "atlas", 1, 10, settings, enqueued.append)
    assert enqueued == []
    assert rows(db, "SELECT status FROM synedre.email_states") == [("parse_failed",)]
    assert rows(db, "SELECT message_id, subject, length(raw) FROM synedre.raw_messages") == \
        [("<big@x>", "big", len(raw))]
    events = rows(db, "SELECT event, detail->>'reason', detail->>'error' FROM synedre.audit_log"
                      " WHERE message_id = %s ORDER BY id", mid)
    assert [e for e, _, _ in events] == ["poll_inserted", "parse_failed"]
    assert events[1][1] == Reason.TOO_LARGE
    assert "larger than 1000" in events[1][2]


def test_attachments_land_in_a_private_directory_and_duplicates_store_nothing(db, tmp_path):
    settings = Settings(state_dir=tmp_path)
    raw = (CORPUS / "cases" / "P07-founder-screenshot-false-noise.eml").read_bytes()
    enqueued = []
    mid = ingest_one(raw, "atlas", 1, 1, settings, enqueued.append)
    assert enqueued == [mid]
    (directory, name, size), = rows(db, """SELECT s.attachments_dir, a.stored_name, a.size
        FROM synedre.email_states s JOIN synedre.attachments a ON a.message_id = s.message_id""")
    assert stat.S_IMODE(Path(directory).stat().st_mode) == 0o700
    assert (Path(directory) / name).stat().st_size == size
    # same delivery again (a poll that died before \Seen): re-handed on, nothing stored twice
    assert ingest_one(raw, "atlas", 1, 1, settings, enqueued.append) is None
    assert enqueued == [mid, mid]
    # a second delivery of the same message under a new UID: audited, not handed on
    assert ingest_one(raw, "atlas", 1, 2, settings, enqueued.append) is None
    assert enqueued == [mid, mid]
    assert rows(db, "SELECT count(*) FROM synedre.raw_messages") == [(1,)]
    assert [e for e, in rows(db, "SELECT event FROM synedre.audit_log ORDER BY id")] == \
        ["poll_inserted", "poll_duplicate"]
    assert len(list(Path(tmp_path / "attachments").iterdir())) == 1  # no orphan directory


def test_new_uidvalidity_still_dedups_on_message_id(db, tmp_path):
    settings = Settings(state_dir=tmp_path)
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    assert ingest_one(raw, "atlas", 1, 1, settings, lambda _: None) is not None
    assert ingest_one(raw, "atlas", 2, 1, settings, lambda _: None) is None
    assert rows(db, "SELECT count(*) FROM synedre.email_states") == [(1,)]


def test_refused_message_keeps_its_parsed_fields_but_no_files(db, tmp_path):
    settings = Settings(state_dir=tmp_path)
    raw = (b"Subject: sans expediteur\r\nMessage-ID: <nofrom@x>\r\nContent-Type: multipart/mixed; boundary=b"
           b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n"
           b"--b\r\nContent-Type: image/png\r\n\r\npng\r\n--b--\r\n")
    enqueued = []
    mid = ingest_one(raw, "atlas", 1, 1, settings, enqueued.append)
    assert enqueued == []
    assert rows(db, "SELECT status, attachments_dir FROM synedre.email_states") == [("parse_failed", None)]
    assert rows(db, "SELECT message_id, subject FROM synedre.raw_messages") == [("<nofrom@x>", "sans expediteur")]
    assert rows(db, "SELECT count(*) FROM synedre.attachments") == [(0,)]
    events = rows(db, "SELECT event, detail FROM synedre.audit_log WHERE message_id = %s ORDER BY id", mid)
    assert [e for e, _ in events] == ["poll_inserted", "parse_failed"]
    assert events[0][1]["attachments"] == 1  # counted, not written
    assert events[1][1]["reason"] == Reason.NO_FROM
    assert not (tmp_path / "attachments").exists()
