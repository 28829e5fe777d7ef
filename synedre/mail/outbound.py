"""The mail facade: Atlas writes to the founder, and to nobody else, exactly once (SPEC §9.6, §9.8).

`compose.build` is pure: threaded to the original email, `[Atlas] ` subject, text and HTML parts,
attachments (a missing file is skipped and reported), a Message-ID derived from the
message and the kind. `send_to_founder` is the shell around it:

1. claim (one short transaction): a row in `synedre.outbound_mail`, unique on (message,
   kind), status `drafting`; the founder's address is read from the directory here;
2. IMAP APPEND of the built mail to the mailbox's Drafts folder with `\\Draft`, its UID
   recorded (`draft_saved`);
3. claim the send: `draft_saved -> sending`, a conditional UPDATE that one caller wins;
4. fetch that draft by its UID and hand its bytes to SMTP, the envelope recipient the
   founder read again from the directory; then `sent`, and the draft is filed in Sent.

No network call happens with a transaction open. Every transition writes an audit row.

A send that may have left is never repeated: at most once. SMTP gives no way to ask a
server "did you take message X?", and a second copy in the founder's inbox is worse than a
recap an operator re-sends by hand. So:
- an error before the DATA command (connect, TLS, AUTH, MAIL, RCPT refused) or a definite
  refusal of the DATA puts the row back to `draft_saved` and raises `MailNotSent`
  (nothing left; the next call sends);
- a connection lost during DATA, or a process that died between the claim and the end
  of SMTP (a `sending` row older than `SEND_LEASE_S`), becomes `send_unknown`: reported
  by every later call, never sent again until an operator says what happened
  (`resolve_unknown`).

The parts: `compose` builds the MIME message, `outbox` holds the row and its status
(the only writer of `OutboundStatus`), `transport` speaks IMAP and SMTP; this module is the
loop that walks a mail through them.

The caller gives no address at all: the sender comes from the mailbox registry (which alone
resolves hosts and the secret), the recipient from `synedre.founder`. Logs carry the
message id, the kind and the Message-ID; never a body, a password or an address.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from synedre import mailboxes
from synedre.db.types import Row
from synedre.log import log
from synedre.mail import outbox, transport
from synedre.mail.compose import BuiltMail, Skipped, build, check_kind, rfc_message_id
from synedre.mail.errors import FounderMissing, MailMaybeSent, MailNotSent, OutboundError, UnknownMessage
from synedre.mail.outbox import ConnFactory, Context
from synedre.mailboxes import Mailbox
from synedre.pipeline import OutboundStatus

# claim -> draft -> claim send -> send, plus one re-draft when the draft vanished.
_MAX_STEPS = 8


class SendOutcome(StrEnum):
    SENT = "sent"                  # this call handed it to SMTP
    ALREADY_SENT = "already_sent"  # an earlier call did: nothing sent now
    DRAFT_SAVED = "draft_saved"    # save_draft only
    IN_PROGRESS = "in_progress"    # another caller holds a live claim: nothing done now
    SEND_UNKNOWN = "send_unknown"  # may have left; an operator decides (resolve_unknown)



@dataclass(frozen=True)
class SendResult:
    outcome: SendOutcome
    status: OutboundStatus
    rfc_message_id: str
    draft_uid: int | None
    skipped: tuple[Skipped, ...] = ()  # known when this call built the mail
    error: str | None = None



# -- the facade ----------------------------------------------------------------------------

def _from_address(box: Mailbox, ctx: Context) -> str:
    """The account's own address when its login is one (relays want From = the login), else
    the directory's Atlas address."""
    return box.username if "@" in box.username else ctx.atlas_address


def _result(row: Row, outcome: SendOutcome, skipped: Sequence[Skipped] = ()) -> SendResult:
    return SendResult(outcome, OutboundStatus(row["status"]), row["rfc_message_id"], row["draft_uid"],
                      tuple(skipped), row["error"])


def _passive(row: Row) -> SendResult:
    """What a call that cannot move the row says about it."""
    status = OutboundStatus(row["status"])
    if status is OutboundStatus.SENT:
        return _result(row, SendOutcome.ALREADY_SENT)
    if status is OutboundStatus.SEND_UNKNOWN:
        return _result(row, SendOutcome.SEND_UNKNOWN)
    return _result(row, SendOutcome.IN_PROGRESS)


def _save_draft(conn_factory: ConnFactory, box: Mailbox, row: Row, ctx: Context, kind: str,
                subject: str, text: str, html: str | None,
                attachments: Sequence[Path]) -> tuple[Row | None, BuiltMail]:
    from_address = _from_address(box, ctx)
    built = build(kind, row["message_id"], ctx.original_id, ctx.founder_address, from_address,
                  subject, text, html, attachments, references=ctx.references,
                  founder_name=ctx.founder_name)
    if built.rfc_message_id != row["rfc_message_id"]:
        # the sender's domain changed since the claim: keep the id the row promised
        built.message.replace_header("Message-ID", row["rfc_message_id"])
        built = BuiltMail(built.message, row["rfc_message_id"], built.attached, built.skipped)
    try:
        with box.session() as client:
            folder, uidvalidity, uid = transport.append_draft(client, built, look_first=row["attempts"] > 1)
    except (*transport.IMAP_ERRORS, MailNotSent) as exc:
        with conn_factory() as conn:
            outbox.release(conn, row, OutboundStatus.DRAFTING, f"{type(exc).__name__}: {exc}", "mail_draft_failed")
        if isinstance(exc, mailboxes.LoginRefused):
            raise MailNotSent(f"saving the draft failed: {exc}", transient=False) from exc
        raise MailNotSent(f"saving the draft failed: {type(exc).__name__}", transient=True) from exc
    with conn_factory() as conn:
        saved = outbox.draft_saved(conn, row, folder, uidvalidity, uid, built.skipped)
    log.info("mail_draft_saved", message_id=row["message_id"], kind=kind,
             rfc_message_id=built.rfc_message_id, draft_uid=uid, attached=len(built.attached),
             skipped=len(built.skipped), fenced_out=saved is None)
    return saved, built


def _send(conn_factory: ConnFactory, box: Mailbox, row: Row, recipient: str,
          from_address: str) -> SendResult | None:
    """Send the claimed draft. None: the draft is gone and the row is `drafting` again."""
    bound = {"message_id": row["message_id"], "kind": row["kind"], "rfc_message_id": row["rfc_message_id"]}
    try:
        with box.session() as client:
            draft = transport.fetch_draft(client, row)
    except transport.IMAP_ERRORS as exc:
        with conn_factory() as conn:
            outbox.release(conn, row, OutboundStatus.DRAFT_SAVED, f"{type(exc).__name__}: {exc}", "mail_send_deferred")
        if isinstance(exc, mailboxes.LoginRefused):
            raise MailNotSent(f"fetching the draft failed: {exc}", transient=False) from exc
        raise MailNotSent(f"fetching the draft failed: {type(exc).__name__}", transient=True) from exc
    if draft is None:
        with conn_factory() as conn:
            outbox.release(conn, row, OutboundStatus.DRAFTING, "the draft is no longer in its folder",
                           "mail_draft_missing")
        log.warning("mail_draft_missing", **bound)
        return None
    uid, raw = draft
    try:
        reply = transport.deliver(box, from_address, recipient, raw)
    except MailNotSent as exc:
        with conn_factory() as conn:
            outbox.release(conn, row, OutboundStatus.DRAFT_SAVED, str(exc), "mail_send_deferred",
                           code=exc.code, transient=exc.transient)
        log.warning("mail_not_sent", **bound, code=exc.code, transient=exc.transient)
        raise
    except MailMaybeSent as exc:
        with conn_factory() as conn:
            unknown = outbox.mark_unknown(conn, row, str(exc))
        log.error("mail_send_unknown", **bound, reason="lost_during_data")
        return _result(unknown or {**row, "status": OutboundStatus.SEND_UNKNOWN}, SendOutcome.SEND_UNKNOWN)
    with conn_factory() as conn:
        outbox.mark_sent(conn, row, reply)
    log.info("mail_sent", **bound, draft_uid=uid)
    transport.file_sent(box, row, uid)
    return _result({**row, "status": OutboundStatus.SENT, "error": None, "draft_uid": uid}, SendOutcome.SENT)


def send_to_founder(conn_factory: ConnFactory, mailbox_id: str, message_db_id: int, kind: str, *,
                    subject: str, text: str, html: str | None = None,
                    attachments: Sequence[Path] = ()) -> SendResult:
    """Mail `kind` about message `message_db_id` to the founder from mailbox `mailbox_id`:
    a draft, then that draft sent, once for each (message, kind) however often it is called.

    Returns what happened (`SendOutcome`); raises `MailNotSent` when nothing left and a later
    call may send (`transient` says whether retrying soon makes sense), `FounderMissing`,
    `UnknownMessage`, `RegistryError` for what no retry fixes.
    """
    return _run(conn_factory, mailbox_id, message_db_id, kind, subject, text, html, attachments,
                send=True)


def save_draft(conn_factory: ConnFactory, mailbox_id: str, message_db_id: int, kind: str, *,
               subject: str, text: str, html: str | None = None,
               attachments: Sequence[Path] = ()) -> SendResult:
    """Only the first half: the draft in Drafts (idempotent), not sent. `send_draft` sends it."""
    return _run(conn_factory, mailbox_id, message_db_id, kind, subject, text, html, attachments,
                send=False)


def send_draft(conn_factory: ConnFactory, mailbox_id: str, message_db_id: int, kind: str) -> SendResult:
    """Send the draft already saved for (message, kind), by its id; never a second copy."""
    box = mailboxes.get(mailbox_id)
    with conn_factory() as conn:
        ctx = outbox.context(conn, message_db_id)
        row = outbox.find(conn, message_db_id, kind)
    if row is None:
        raise OutboundError(f"no draft for message {message_db_id} kind {kind!r}")
    return _run(conn_factory, box.id, message_db_id, kind, None, None, None, (), send=True,
                box=box, ctx=ctx)


def _run(conn_factory: ConnFactory, mailbox_id: str, message_db_id: int, kind: str,
         subject: str | None, text: str | None, html: str | None, attachments: Sequence[Path], *,
         send: bool, box: Mailbox | None = None, ctx: Context | None = None) -> SendResult:
    check_kind(kind)
    box = box or mailboxes.get(mailbox_id)
    if send and not box.smtp_host:
        raise mailboxes.RegistryError(f"mailbox {box.id!r} has no smtp_host: it cannot send")
    if ctx is None:
        with conn_factory() as conn:
            ctx = outbox.context(conn, message_db_id)
    from_address = _from_address(box, ctx)
    rfc = rfc_message_id(kind, message_db_id, ctx.original_id, from_address)
    skipped: tuple[Skipped, ...] = ()
    for _ in range(_MAX_STEPS):
        with conn_factory() as conn:
            row, ours = outbox.claim(conn, message_db_id, kind, box.id, rfc)
        status = OutboundStatus(row["status"])
        if ours:
            if subject is None or text is None:  # send_draft: no content to draft again
                with conn_factory() as conn:
                    outbox.release(conn, row, OutboundStatus.DRAFTING, "no draft and no content to build one",
                                   "mail_draft_missing")
                raise OutboundError(f"the draft of message {message_db_id} kind {kind!r} is gone; "
                                    "send_to_founder with its content saves it again")
            saved, built = _save_draft(conn_factory, box, row, ctx, kind, subject, text, html, attachments)
            skipped = built.skipped
            if saved is None:  # another caller took the claim over meanwhile
                continue
            if not send:
                return _result(saved, SendOutcome.DRAFT_SAVED, skipped)
            continue
        if status is OutboundStatus.DRAFT_SAVED and not send:
            return _result(row, SendOutcome.DRAFT_SAVED)
        if status is OutboundStatus.DRAFT_SAVED:
            with conn_factory() as conn:
                claimed = outbox.claim_send(conn, row)
            if claimed is None:  # another caller won the send
                continue
            result = _send(conn_factory, box, claimed[0], claimed[1], from_address)
            if result is None:  # the draft vanished: draft again, then send
                continue
            return SendResult(result.outcome, result.status, result.rfc_message_id, result.draft_uid,
                              skipped, result.error)
        return _passive(row)
    raise OutboundError(f"message {message_db_id} kind {kind!r}: no progress after {_MAX_STEPS} steps")


resolve_unknown = outbox.resolve_unknown

__all__ = [
    "ConnFactory", "FounderMissing", "MailMaybeSent", "MailNotSent", "OutboundError", "SendOutcome", "SendResult",
    "Skipped", "UnknownMessage", "resolve_unknown", "save_draft", "send_draft", "send_to_founder",
]
