"""The outbound mail's state-machine writes one at a time against the real database: the
release of a claim and the send whose outcome is unknown, with their audit rows exactly
(what `synedre inspect` shows an operator deciding whether a recap left). Written for the
mutation run (docs/mutation.md): the end-to-end tests reach these through Dovecot and SMTP
but read only the final status."""
import psycopg
import pytest
from psycopg.rows import dict_row

from synedre.config import Settings
from synedre.mail import outbox
from synedre.pipeline import OutboundStatus
from synedre.stages.poll import ingest_one
from tests.conftest import CORPUS

pytestmark = pytest.mark.timeout(60)
ERROR = "smtp said: " + "x" * 3000  # longer than both the row's and the audit's bounds


@pytest.fixture
def conn(db, tmp_path):
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    ingest_one(raw, "atlas", 1, 1, Settings(state_dir=tmp_path), lambda _: None)
    with psycopg.connect(db, row_factory=dict_row, autocommit=True) as c:
        yield c


def claimed(conn):
    with conn.transaction():
        row, owned = outbox.claim(conn, 1, "recap", "atlas", "<recap-1@atlas.test>")
    assert owned and row["status"] == OutboundStatus.DRAFTING
    return row


def audit(conn, event):
    return [r["detail"] for r in conn.execute(
        "SELECT detail FROM synedre.audit_log WHERE message_id = 1 AND event = %s ORDER BY id", (event,))]


def test_a_released_claim_keeps_the_error_bounded_and_audits_who_and_why(conn):
    row = claimed(conn)
    with conn.transaction():
        outbox.release(conn, row, OutboundStatus.DRAFTING, ERROR, "mail_draft_failed", transient=True)
    stored = conn.execute("SELECT * FROM synedre.outbound_mail WHERE id = %s", (row["id"],)).fetchone()
    assert (stored["status"], stored["claimed_at"], stored["error"]) == ("drafting", None, ERROR[:2000])
    assert audit(conn, "mail_draft_failed") == [{
        "kind": "recap", "rfc_message_id": "<recap-1@atlas.test>", "attempt": row["attempts"],
        "error": ERROR[:500], "transient": True}]


def test_a_release_by_a_superseded_claim_changes_nothing_and_audits_nothing(conn):
    row = claimed(conn)
    conn.execute("UPDATE synedre.outbound_mail SET attempts = attempts + 1 WHERE id = %s", (row["id"],))
    with conn.transaction():
        outbox.release(conn, row, OutboundStatus.DRAFTING, "late", "mail_draft_failed")
    assert conn.execute("SELECT claimed_at FROM synedre.outbound_mail WHERE id = %s",
                        (row["id"],)).fetchone()["claimed_at"] is not None
    assert audit(conn, "mail_draft_failed") == []


def test_a_send_lost_during_data_becomes_unknown_with_its_reason_once(conn):
    row = claimed(conn)
    conn.execute("UPDATE synedre.outbound_mail SET status = 'sending', draft_uid = 7 WHERE id = %s", (row["id"],))
    sending = conn.execute("SELECT * FROM synedre.outbound_mail WHERE id = %s", (row["id"],)).fetchone()
    with conn.transaction():
        unknown = outbox.mark_unknown(conn, sending, ERROR)
    assert unknown["status"] == "send_unknown" and unknown["error"] == ERROR[:2000]
    assert audit(conn, "mail_send_unknown") == [{
        "kind": "recap", "rfc_message_id": "<recap-1@atlas.test>", "attempt": sending["attempts"],
        "reason": "lost_during_data", "error": ERROR[:500]}]
    with conn.transaction():  # no longer sending: a second verdict writes nothing
        assert outbox.mark_unknown(conn, sending, "again") is None
    assert len(audit(conn, "mail_send_unknown")) == 1


def test_a_send_marked_sent_audits_what_left_and_how_the_server_answered(conn):
    row = claimed(conn)
    conn.execute("UPDATE synedre.outbound_mail SET status = 'sending', draft_uid = 7 WHERE id = %s", (row["id"],))
    sending = conn.execute("SELECT * FROM synedre.outbound_mail WHERE id = %s", (row["id"],)).fetchone()
    reply = "250 2.0.0 Ok: queued as " + "Q" * 300
    with conn.transaction():
        outbox.mark_sent(conn, sending, reply)
    stored = conn.execute("SELECT * FROM synedre.outbound_mail WHERE id = %s", (row["id"],)).fetchone()
    assert stored["status"] == "sent" and stored["sent_at"] is not None and stored["claimed_at"] is None
    assert audit(conn, "mail_sent") == [{
        "kind": "recap", "rfc_message_id": "<recap-1@atlas.test>", "draft_uid": 7,
        "attempt": sending["attempts"], "smtp_reply": reply[:200]}]


def sending_since(conn, row, seconds):
    conn.execute("UPDATE synedre.outbound_mail SET status = 'sending', draft_uid = 7,"
                 " claimed_at = now() - make_interval(secs => %s) WHERE id = %s", (seconds, row["id"]))


def test_a_send_within_its_lease_is_left_sending_even_past_a_draft_s_lease(conn):
    row = claimed(conn)
    sending_since(conn, row, outbox.DRAFT_LEASE_S + 60)  # < SEND_LEASE_S: it may still be sending
    assert outbox.DRAFT_LEASE_S + 60 < outbox.SEND_LEASE_S
    with conn.transaction():
        again, owned = outbox.claim(conn, 1, "recap", "atlas", "<recap-1@atlas.test>")
    assert (again["status"], owned) == ("sending", False) and audit(conn, "mail_send_unknown") == []


def test_a_send_past_its_lease_becomes_unknown_once_and_is_not_owned(conn):
    row = claimed(conn)
    sending_since(conn, row, outbox.SEND_LEASE_S + 60)
    with conn.transaction():
        stuck, owned = outbox.claim(conn, 1, "recap", "atlas", "<recap-1@atlas.test>")
    assert (stuck["status"], owned) == ("send_unknown", False)
    assert audit(conn, "mail_send_unknown") == [{
        "kind": "recap", "rfc_message_id": "<recap-1@atlas.test>", "attempt": row["attempts"],
        "reason": "stale_sending_claim"}]
