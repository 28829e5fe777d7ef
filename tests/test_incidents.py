"""The escalation path (SPEC §12): a supervision incident is mailed into Atlas's inbox as
`[Atlas incident] …`, once per kind per hour, and an incident mail's own processing never
raises another."""
from __future__ import annotations

import email
import json
import time
from email import policy

import psycopg
import pytest

from synedre import incidents
from synedre.spawn.locks import LOCK_PREFIX, STALE_AFTER_S


def test_an_incident_mail_is_marked_for_the_loop_guard_and_says_what_happened():
    incident = incidents.stale_locks([{"message_id": "41", "host": "w1", "pid": 7, "unrenewed_s": 700.0}])
    msg = incidents.build(incident, "atlas@example.test")
    assert msg["Subject"] == "[Atlas incident] 1 launch lock(s) not renewed for 10 minutes"
    assert msg[incidents.HEADER] == "stale_lock"
    assert msg["Auto-Submitted"] == "auto-generated"
    assert incident.message_ids == (41,)
    assert '"unrenewed_s": 700.0' in msg.get_content()


def plant_stale_lock(r, message_id: int | str, unrenewed_s: float = STALE_AFTER_S + 60) -> None:
    """A lock whose heartbeat is gone and whose key never expires (no TTL)."""
    now = time.time()
    r.set(f"{LOCK_PREFIX}{message_id}", json.dumps({
        "token": "t0ken", "host": "worker-gone", "pid": 4242,
        "acquired_at": now - unrenewed_s - 120, "renewed_at": now - unrenewed_s}))


def incident_mails(dovecot) -> list[email.message.EmailMessage]:
    c = dovecot.client()
    try:
        c.select_folder("INBOX", readonly=True)
        uids = c.search(["ALL"])
        mails = [email.message_from_bytes(d[b"BODY[]"], policy=policy.default)
                 for d in c.fetch(uids, ["BODY.PEEK[]"]).values()] if uids else []
    finally:
        c.logout()
    return [m for m in mails if str(m["Subject"]).startswith("[Atlas incident] ")]  # type: ignore[misc]


@pytest.fixture
def inbox(services):
    with psycopg.connect(services["db"], autocommit=True) as conn:
        conn.execute("TRUNCATE synedre.incidents RESTART IDENTITY")
    yield services


def test_a_stale_lock_mails_exactly_one_incident_and_a_second_watchdog_run_adds_none(inbox):
    from tasks.spawn import lock_watchdog

    r = inbox["redis"]
    plant_stale_lock(r, 41)
    assert lock_watchdog() == 1  # one watchdog period: the mail is in the inbox when it returns
    mails = incident_mails(inbox["dovecot"])
    assert len(mails) == 1
    mail = mails[0]
    assert mail[incidents.HEADER] == "stale_lock"
    assert "worker-gone" in mail.get_content()
    plant_stale_lock(r, 42)  # a second stale lock in the same hour: coalesced
    assert lock_watchdog() == 2
    assert len(incident_mails(inbox["dovecot"])) == 1
    with psycopg.connect(inbox["db"]) as conn:
        assert conn.execute("SELECT kind, status FROM synedre.incidents").fetchall() == [("stale_lock", "mailed")]


def test_an_incident_mail_going_through_the_pipeline_raises_no_incident(inbox):
    from synedre import mailboxes
    from synedre.stages.poll import poll
    from tasks.spawn import lock_watchdog
    from tasks.sweep import sweep

    r, db_url = inbox["redis"], inbox["db"]
    plant_stale_lock(r, 41)
    lock_watchdog()
    r.delete(f"{LOCK_PREFIX}41")
    # the incident enters the same chain as any email: polled, stored, handed on
    enqueued: list[int] = []
    report = poll(mailboxes.get("atlas"), enqueued.append)
    assert len(report.inserted) == 1 and enqueued == report.inserted
    mid = report.inserted[0]
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT subject FROM synedre.raw_messages WHERE id = %s", (mid,)).fetchone()[0] \
            .startswith("[Atlas incident] ")
        # a new hour for coalescing: only the loop guard may stop what follows
        conn.execute("TRUNCATE synedre.incidents RESTART IDENTITY")
        # its processing goes wrong twice: its launch lock goes stale, its stage is stuck
        conn.execute("UPDATE synedre.email_states SET status_at = now() - interval '1 day' WHERE message_id = %s",
                     (mid,))
        # ... and was re-offered by sweeps already: this sweep's re-offer is the last straw
        for _ in range(incidents.STUCK_REOFFERS - 1):
            conn.execute("INSERT INTO synedre.audit_log (message_id, event, detail)"
                         " VALUES (%s, 'sweep_requeued', '{}')", (mid,))
    plant_stale_lock(r, mid)
    assert lock_watchdog() == 1
    sweep()
    assert incidents.escalate_stuck([(mid, "scan")]) is incidents.IncidentOutcome.SUPPRESSED, audit_of(db_url, mid)
    assert incidents.raise_incident(incidents.stuck_stages([(mid, "scan")])) is incidents.IncidentOutcome.SUPPRESSED
    assert len(incident_mails(inbox["dovecot"])) == 1
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM synedre.incidents").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM synedre.audit_log WHERE message_id = %s"
                            " AND event LIKE 'sweep%%'", (mid,)).fetchone()[0] >= 1  # the sweep did see it


def test_an_incident_about_a_real_message_and_an_incident_mail_is_raised_for_the_real_one_only(inbox):
    from synedre import mailboxes
    from synedre.stages.poll import poll

    assert incidents.raise_incident(incidents.dependency_down("clamd", 360)) is incidents.IncidentOutcome.MAILED
    mid = poll(mailboxes.get("atlas"), lambda _mid: None).inserted[0]
    outcome = incidents.raise_incident(incidents.stuck_stages([(mid, "scan"), (99, "classify")]))
    assert outcome is incidents.IncidentOutcome.MAILED
    mails = incident_mails(inbox["dovecot"])
    assert sorted(str(m[incidents.HEADER]) for m in mails) == ["dependency_down", "stuck_stage"]
    stuck = next(m for m in mails if m[incidents.HEADER] == "stuck_stage").get_content()
    assert "Messages: 99" in stuck.splitlines()


def audit_of(url: str, mid: int) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT a.event, a.at, now(), s.status, s.status_at, s.waiting_until"
                            " FROM synedre.audit_log a JOIN synedre.email_states s USING (message_id)"
                            " WHERE a.message_id = %s ORDER BY a.id", (mid,)).fetchall()


def make_stuck(url: str, n: int) -> int:
    """A message waiting for scan for a day, which the sweep re-offered `n - 1` times already."""
    with psycopg.connect(url, autocommit=True) as conn:
        mid = conn.execute("INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, subject, raw,"
                           " size) VALUES ('atlas', 1, 7, '<stuck@example.test>', 'Devis', 'x', 1)"
                           " RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO synedre.email_states (message_id, status, status_at)"
                     " VALUES (%s, 'received', now() - interval '1 day')", (mid,))
        for _ in range(n - 1):
            conn.execute("INSERT INTO synedre.audit_log (message_id, event, detail)"
                         " VALUES (%s, 'sweep_requeued', '{}')", (mid,))
    return mid


@pytest.mark.parametrize("reoffers, mails", [(incidents.STUCK_REOFFERS - 1, 0), (incidents.STUCK_REOFFERS, 1)])
def test_a_stage_the_sweep_keeps_re_offering_within_the_hour_is_an_incident_one_re_offer_is_recovery(
        inbox, reoffers, mails):
    from tasks.sweep import sweep

    mid = make_stuck(inbox["db"], reoffers)
    sweep()
    sweep()  # a later sweep in the hour: coalesced, or still not re-offered again (its wait)
    found = incident_mails(inbox["dovecot"])
    assert len(found) == mails, audit_of(inbox["db"], mid)
    if mails:
        assert found[0][incidents.HEADER] == "stuck_stage"
        assert f"Messages: {mid}" in found[0].get_content().splitlines()


def test_an_unreachable_mailbox_releases_the_hour_for_the_next_run(db, monkeypatch):
    monkeypatch.delenv("SYNEDRE_MAILBOXES_FILE", raising=False)
    from synedre.config import get_settings

    get_settings.cache_clear()
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("TRUNCATE synedre.incidents RESTART IDENTITY")
    assert incidents.safely(incidents.spend_cap(200, 200.0)) is incidents.IncidentOutcome.FAILED
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM synedre.incidents").fetchone()[0] == 0
