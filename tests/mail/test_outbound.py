"""The mail facade: to the founder only, threaded, a draft first, sent exactly once."""
from __future__ import annotations

import inspect
import threading
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from synedre import db as synedre_db
from synedre.mail import compose, outbound, outbox, transport
from synedre.mail.compose import build
from synedre.mail.outbound import MailNotSent, SendOutcome as Outcome, send_to_founder
from synedre.pipeline import OutboundStatus as Status
from tests.mail.fixtures import ATLAS, FOUNDER, insert_founder, use_atlas_mailbox
from tests.services.smtp import start_smtp

FOUNDER_OTHER = "julien.moreau@gmail.com"
CLIENT = "contact@boulangerie-dupont.fr"
ORIGINAL = "<fwd-42@atelier-moreau.fr>"
CHAIN = "<client-1@boulangerie-dupont.fr> <client-2@boulangerie-dupont.fr>"
BODY_MARK = "corps-du-recap-7f3a"


def rows(url, sql, *args):
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


def _shot(tmp_path: Path, name: str = "home.png") -> Path:
    p = tmp_path / name
    p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    return p


# -- the pure builder ----------------------------------------------------------------------

def test_built_mail_is_threaded_with_text_html_and_attachments_and_skips_a_missing_one(tmp_path):
    shot = _shot(tmp_path)
    built = build("recap", 42, ORIGINAL, FOUNDER, ATLAS, "[Atlas] Site   mis à jour", "Bonjour,\nc'est fait.",
                  "<p>Bonjour, c'est fait.</p>", [shot, tmp_path / "gone.png"],
                  references=compose.message_ids(CHAIN), founder_name="Julien Moreau")
    msg = built.message
    assert msg["Subject"] == "[Atlas] Site mis à jour"          # prefixed once, one line
    assert msg["In-Reply-To"] == ORIGINAL
    assert msg["References"].split() == [*CHAIN.split(), ORIGINAL]
    assert msg["To"].addresses[0].addr_spec == FOUNDER
    assert msg["From"].addresses[0].addr_spec == ATLAS
    assert msg["Message-ID"] == built.rfc_message_id
    assert built.rfc_message_id.startswith("<atlas-recap-42.") and built.rfc_message_id.endswith("@atelier-moreau.fr>")
    body = msg.get_body(("plain",))
    assert body is not None and "c'est fait." in body.get_content()
    html = msg.get_body(("html",))
    assert html is not None and "<p>Bonjour" in html.get_content()
    files = [(p.get_filename(), p.get_content_type(), p.get_content()) for p in msg.iter_attachments()]
    assert files == [("home.png", "image/png", shot.read_bytes())]
    assert built.attached == ("home.png",)
    assert built.skipped == (compose.Skipped("gone.png", "missing"),)
    assert b"\r\n" in built.as_bytes() and b"\n\n" not in built.as_bytes().replace(b"\r\n", b"")


def test_message_id_is_deterministic_per_message_and_kind():
    one = compose.rfc_message_id("recap", 7, ORIGINAL, ATLAS)
    assert one == compose.rfc_message_id("recap", 7, ORIGINAL, ATLAS)
    assert one != compose.rfc_message_id("alert", 7, ORIGINAL, ATLAS)
    assert one != compose.rfc_message_id("recap", 8, ORIGINAL, ATLAS)
    with pytest.raises(ValueError):
        compose.rfc_message_id("Recap!", 7, ORIGINAL, ATLAS)


def test_a_subject_cannot_smuggle_a_header_or_a_recipient():
    built = build("alert", 1, None, FOUNDER, ATLAS, f"urgent\r\nBcc: {CLIENT}\r\nX-Evil: 1", "t", None, [])
    raw = built.as_bytes()
    assert built.message["Bcc"] is None and built.message["X-Evil"] is None
    assert built.message["In-Reply-To"] is None and built.message["References"] is None  # nothing to thread to
    assert built.message["Subject"] == f"[Atlas] urgent Bcc: {CLIENT} X-Evil: 1"
    assert raw.count(b"\r\nBcc:") == 0


def test_appenduid_is_read_from_the_append_reply():
    assert transport.appenduid(b"[APPENDUID 1796119008 12] Append completed.") == (1796119008, 12)
    assert transport.appenduid(b"Append completed.") is None


def test_no_entry_point_takes_a_recipient():
    for fn in (outbound.send_to_founder, outbound.save_draft, outbound.send_draft):
        params = set(inspect.signature(fn).parameters)
        assert not params & {"to", "recipient", "recipients", "cc", "bcc", "founder_address"}, fn


# -- against Dovecot, aiosmtpd and PostgreSQL ------------------------------------------------

@pytest.fixture
def smtp():
    sink = start_smtp()
    yield sink
    sink.stop()


@pytest.fixture
def mail(db, dovecot, smtp, tmp_path, monkeypatch):
    """A founder, one stored message (a forward in a client thread), the registry's atlas
    mailbox on Dovecot with its SMTP on aiosmtpd."""
    use_atlas_mailbox(tmp_path, dovecot, smtp, monkeypatch)
    with psycopg.connect(db) as conn:
        insert_founder(conn, [FOUNDER, FOUNDER_OTHER])
        raw = f"From: {FOUNDER}\r\nMessage-ID: {ORIGINAL}\r\nReferences: {CHAIN}\r\n\r\nFwd\r\n".encode()
        (mid,) = conn.execute(
            "INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, envelope_from, subject,"
            " headers, raw, size) VALUES ('atlas', 1, 1, %s, %s, 'Fwd: refonte', %s, %s, %s) RETURNING id",
            (ORIGINAL, FOUNDER, Jsonb([["Message-ID", ORIGINAL], ["References", CHAIN]]), raw, len(raw))).fetchone()
    return {"db": db, "dovecot": dovecot, "smtp": smtp, "mid": mid, "tmp": tmp_path}


def _send(mail, **kw):
    args = {"subject": "Refonte en ligne", "text": f"{BODY_MARK}\nC'est en ligne.",
            "html": f"<p>{BODY_MARK}</p>", "attachments": [_shot(mail["tmp"])], **kw}
    return send_to_founder(synedre_db.transaction, "atlas", mail["mid"], "recap", **args)


def _folder(dovecot, name):
    c = dovecot.client()
    try:
        if not c.folder_exists(name):
            return None
        c.select_folder(name, readonly=True)
        uids = c.search(["ALL"])
        return c.fetch(uids, ["FLAGS", "BODY.PEEK[]"]) if uids else {}
    finally:
        c.logout()


def _row(mail):
    (row,) = rows(mail["db"], "SELECT status, attempts, draft_uid, sent_at IS NOT NULL FROM synedre.outbound_mail")
    return row


def _events(mail):
    return [e for (e,) in rows(mail["db"], "SELECT event FROM synedre.audit_log WHERE event LIKE 'mail_%%'"
                                           " ORDER BY id")]


def test_it_is_first_saved_as_a_draft_in_drafts_with_the_draft_flag(mail):
    first = outbound.save_draft(synedre_db.transaction, "atlas", mail["mid"], "recap", subject="Refonte",
                                text=BODY_MARK, attachments=[mail["tmp"] / "missing.png"])
    assert first.outcome is Outcome.DRAFT_SAVED and first.status is Status.DRAFT_SAVED
    assert first.skipped == (compose.Skipped("missing.png", "missing"),)
    drafts = _folder(mail["dovecot"], "Drafts")  # created: the test server had none
    assert drafts is not None and list(drafts) == [first.draft_uid]
    (item,) = drafts.values()
    assert b"\\Draft" in item[b"FLAGS"]
    assert f"Message-ID: {first.rfc_message_id}".encode() in item[b"BODY[]"]
    assert f"In-Reply-To: {ORIGINAL}".encode() in item[b"BODY[]"]
    again = outbound.save_draft(synedre_db.transaction, "atlas", mail["mid"], "recap", subject="Refonte",
                                text=BODY_MARK)
    assert (again.outcome, again.draft_uid) == (Outcome.DRAFT_SAVED, first.draft_uid)
    assert len(_folder(mail["dovecot"], "Drafts")) == 1
    assert mail["smtp"].messages() == []
    assert _events(mail) == ["mail_draft_saved"]


@pytest.mark.parametrize("drafted", [False, True], ids=["racing-the-draft", "racing-the-send"])
def test_ten_concurrent_sends_deliver_exactly_one_email(mail, drafted):
    if drafted:  # all ten then race the draft_saved -> sending claim itself
        outbound.save_draft(synedre_db.transaction, "atlas", mail["mid"], "recap", subject="Refonte en ligne",
                            text=BODY_MARK, attachments=[_shot(mail["tmp"])])
    barrier = threading.Barrier(10)
    results, errors = [], []

    def one():
        barrier.wait()
        try:
            results.append(_send(mail))
        except Exception as exc:  # the assertion below shows it
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    outcomes = sorted(r.outcome for r in results)
    assert outcomes.count(Outcome.SENT) == 1, outcomes
    assert set(outcomes) <= {Outcome.SENT, Outcome.IN_PROGRESS, Outcome.ALREADY_SENT}
    # redelivered, retried, called by hand: still one
    for _ in range(3):
        assert _send(mail).outcome is Outcome.ALREADY_SENT
    (got,) = mail["smtp"].wait_for(1)
    assert got.rcpt_tos == (FOUNDER,) and got.mail_from == ATLAS
    msg = got.message
    assert msg["Subject"] == "[Atlas] Refonte en ligne" and msg["In-Reply-To"] == ORIGINAL
    assert [p.get_filename() for p in msg.iter_attachments()] == ["home.png"]
    assert msg["Message-ID"] == results[0].rfc_message_id
    assert _row(mail)[0] == "sent" and _row(mail)[3]
    assert _events(mail) == ["mail_draft_saved", "mail_sent"]
    # filed as a mail client does: out of Drafts, into Sent, no longer a draft
    assert _folder(mail["dovecot"], "Drafts") == {}
    (filed,) = _folder(mail["dovecot"], "Sent").values()
    assert b"\\Draft" not in filed[b"FLAGS"] and b"\\Seen" in filed[b"FLAGS"]


def test_the_founder_is_the_only_recipient_whatever_the_caller_or_the_draft_says(mail):
    with pytest.raises(TypeError):
        _send(mail, to=CLIENT)  # type: ignore[call-arg]
    saved = outbound.save_draft(synedre_db.transaction, "atlas", mail["mid"], "recap",
                                subject=f"pour {CLIENT}", text=f"To: {CLIENT}\nCc: {CLIENT}")
    # someone with access to Atlas's mailbox rewrites the draft to the client
    c = mail["dovecot"].client()
    c.select_folder("Drafts")
    raw = c.fetch([saved.draft_uid], ["BODY.PEEK[]"])[saved.draft_uid][b"BODY[]"]
    c.delete_messages([saved.draft_uid])
    c.expunge()
    c.append("Drafts", raw.replace(f"To: Julien Moreau <{FOUNDER}>".encode(),
                                   f"To: {CLIENT}\r\nCc: {CLIENT}\r\nBcc: {CLIENT}".encode()), flags=(b"\\Draft",))
    c.logout()
    result = outbound.send_draft(synedre_db.transaction, "atlas", mail["mid"], "recap")
    assert result.outcome is Outcome.SENT and result.draft_uid != saved.draft_uid  # found by Message-ID
    (got,) = mail["smtp"].wait_for(1)
    assert got.rcpt_tos == (FOUNDER,)  # the envelope decides, and it is read from synedre.founder


def test_a_send_after_a_crash_in_sending_sends_nothing_and_reports_it(mail):
    outbound.save_draft(synedre_db.transaction, "atlas", mail["mid"], "recap", subject="s", text="t")
    # the process that claimed the send died before SMTP finished
    with psycopg.connect(mail["db"]) as conn:
        conn.execute("UPDATE synedre.outbound_mail SET status = 'sending', attempts = attempts + 1,"
                     " claimed_at = now() - interval '1 day'")
    for _ in range(3):
        result = _send(mail)
        assert result.outcome is Outcome.SEND_UNKNOWN and result.status is Status.SEND_UNKNOWN
        assert "may have left" in (result.error or "")
    assert mail["smtp"].messages() == []
    assert _events(mail) == ["mail_draft_saved", "mail_send_unknown"]
    # the operator checked: it never left; the next call sends the draft, once
    assert outbound.resolve_unknown(synedre_db.transaction, mail["mid"], "recap", was_sent=False) \
        is Status.DRAFT_SAVED
    assert _send(mail).outcome is Outcome.SENT
    assert _send(mail).outcome is Outcome.ALREADY_SENT
    assert len(mail["smtp"].wait_for(1)) == 1


def test_a_fresh_send_claim_is_left_alone(mail):
    outbound.save_draft(synedre_db.transaction, "atlas", mail["mid"], "recap", subject="s", text="t")
    with psycopg.connect(mail["db"]) as conn:  # another worker is sending right now
        conn.execute("UPDATE synedre.outbound_mail SET status = 'sending', claimed_at = now()")
    assert _send(mail).outcome is Outcome.IN_PROGRESS
    assert _row(mail)[0] == "sending" and mail["smtp"].messages() == []


def test_a_connection_lost_during_data_is_reported_and_never_sent_again(mail):
    mail["smtp"].drop_after_data = 1  # the relay took it, then the reply was lost
    assert _send(mail).outcome is Outcome.SEND_UNKNOWN
    assert _send(mail).outcome is Outcome.SEND_UNKNOWN
    assert len(mail["smtp"].messages()) == 1
    assert _row(mail)[0] == "send_unknown"
    assert _events(mail) == ["mail_draft_saved", "mail_send_unknown"]


def test_a_refusal_before_data_keeps_the_draft_to_send_later(mail):
    mail["smtp"].refuse_rcpt = 1
    with pytest.raises(MailNotSent) as refused:
        _send(mail)
    assert refused.value.transient and refused.value.code == 451
    assert _row(mail)[0] == "draft_saved" and mail["smtp"].messages() == []
    assert _send(mail).outcome is Outcome.SENT
    assert len(mail["smtp"].wait_for(1)) == 1
    assert _events(mail) == ["mail_draft_saved", "mail_send_deferred", "mail_sent"]


def test_a_refused_data_is_not_sent_and_is_not_retried_as_transient(mail):
    mail["smtp"].refuse_data = 1
    with pytest.raises(MailNotSent) as refused:
        _send(mail)
    assert not refused.value.transient and refused.value.code == 554
    assert _row(mail)[0] == "draft_saved" and mail["smtp"].messages() == []
    assert _send(mail).outcome is Outcome.SENT  # e.g. after the operator fixed the relay
    assert len(mail["smtp"].wait_for(1)) == 1


def test_a_taken_over_draft_claim_adopts_the_draft_already_appended(mail):
    first = outbound.save_draft(synedre_db.transaction, "atlas", mail["mid"], "recap", subject="s", text="t")
    with psycopg.connect(mail["db"]) as conn:  # died after APPEND, before recording it
        conn.execute("UPDATE synedre.outbound_mail SET status = 'drafting', draft_uid = NULL,"
                     " claimed_at = now() - interval '1 day'")
    again = outbound.save_draft(synedre_db.transaction, "atlas", mail["mid"], "recap", subject="s", text="t")
    assert again.draft_uid == first.draft_uid
    assert len(_folder(mail["dovecot"], "Drafts")) == 1


def test_smtp_login_uses_the_mailbox_secret_and_logs_no_body_secret_or_address(
        db, dovecot, tmp_path, monkeypatch, mail, capsys):
    sink = start_smtp(credentials=(dovecot.username, dovecot.password))
    try:
        use_atlas_mailbox(tmp_path, dovecot, sink, monkeypatch)
        assert _send(mail).outcome is Outcome.SENT
        assert sink.logins == [(dovecot.username, True)]
        (got,) = sink.wait_for(1)
        assert got.login == dovecot.username
    finally:
        sink.stop()
    out = capsys.readouterr()
    logs = out.out + out.err
    assert "mail_sent" in logs
    for secret in (dovecot.password, BODY_MARK, FOUNDER, FOUNDER_OTHER):
        assert secret not in logs


def test_without_a_founder_nothing_is_drafted_nor_sent(mail):
    with psycopg.connect(mail["db"]) as conn:
        conn.execute("DELETE FROM synedre.founder")
    with pytest.raises(outbound.FounderMissing):
        _send(mail)
    assert rows(mail["db"], "SELECT count(*) FROM synedre.outbound_mail") == [(0,)]
    assert mail["smtp"].messages() == [] and _folder(mail["dovecot"], "Drafts") is None


def test_a_draft_claim_behind_an_uncommitted_first_one_gets_its_row_and_no_claim(mail):
    """Two first sends of the same mail: the second claim waits on the first's uncommitted
    row and, once it commits, finds it taken (the first's claim is live), without an error."""
    from psycopg.rows import dict_row

    rfc = compose.rfc_message_id("recap", mail["mid"], ORIGINAL, ATLAS)
    first = psycopg.connect(mail["db"], row_factory=dict_row)
    got: list = []
    try:
        row, owned = outbox.claim(first, mail["mid"], "recap", "atlas", rfc)  # uncommitted
        assert owned

        def second() -> None:
            with psycopg.connect(mail["db"], row_factory=dict_row) as conn:
                try:
                    got.append(outbox.claim(conn, mail["mid"], "recap", "atlas", rfc))
                except psycopg.Error as exc:
                    got.append(exc)
        racer = threading.Thread(target=second)
        racer.start()
        with psycopg.connect(mail["db"], autocommit=True) as watch:  # the racer waits on the first's row
            for _ in range(200):
                if watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                 " AND datname = current_database()").fetchone()[0]:
                    break
                threading.Event().wait(0.05)
        first.commit()
        racer.join(timeout=30)
    finally:
        first.close()
    assert len(got) == 1 and not isinstance(got[0], Exception), got
    row, owned = got[0]
    assert not owned and row["rfc_message_id"] == rfc and row["status"] == "drafting"
