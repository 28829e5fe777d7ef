"""The mail facade: Atlas writes to the founder, and to nobody else, exactly once (SPEC §9.6, §9.8).

`build` is pure: threaded to the original email, `[Atlas] ` subject, text and HTML parts,
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

The caller gives no address at all: the sender comes from the mailbox registry (which alone
resolves hosts and the secret), the recipient from `synedre.founder`. Logs carry the
message id, the kind and the Message-ID; never a body, a password or an address.
"""
from __future__ import annotations

import hashlib
import mimetypes
import re
import smtplib
import ssl
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from email import policy
from email.headerregistry import Address
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from email.utils import formatdate
from enum import StrEnum
from pathlib import Path
from typing import Any

import psycopg
from imapclient import DRAFT, SEEN, IMAPClient
from imapclient.exceptions import IMAPClientError
from imapclient.imapclient import DRAFTS, SENT
from psycopg.types.json import Jsonb

from synedre import mailboxes
from synedre.db.types import Conn, Row
from synedre.log import log
from synedre.mailboxes import Mailbox
from synedre.pipeline import OutboundStatus

SUBJECT_PREFIX = "[Atlas] "
SENDER_NAME = "Atlas"
KIND_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# Folder names used when the server flags none with RFC 6154 special-use (nor a usual name).
DRAFTS_FOLDER = "Drafts"
SENT_FOLDER = "Sent"
# Screenshots are proof, not payload: one too large is skipped like a missing one, and the
# whole mail stays under what common SMTP relays accept (25 MB, base64 included).
MAX_ATTACHMENT_BYTES = 8 * 1024 * 1024
MAX_ATTACHMENTS_BYTES = 16 * 1024 * 1024
MAX_REFERENCES = 20
SMTP_TIMEOUT_S = 30.0
# A claim older than this is a dead caller's. Saving a draft is a few IMAP round trips;
# a send is an IMAP fetch plus an SMTP session, each step bounded by its socket timeout.
DRAFT_LEASE_S = 300.0
SEND_LEASE_S = 600.0
# claim -> draft -> claim send -> send, plus one re-draft when the draft vanished.
_MAX_STEPS = 8

ConnFactory = Callable[[], AbstractContextManager[Conn]]


class SendOutcome(StrEnum):
    SENT = "sent"                  # this call handed it to SMTP
    ALREADY_SENT = "already_sent"  # an earlier call did: nothing sent now
    DRAFT_SAVED = "draft_saved"    # save_draft only
    IN_PROGRESS = "in_progress"    # another caller holds a live claim: nothing done now
    SEND_UNKNOWN = "send_unknown"  # may have left; an operator decides (resolve_unknown)


class OutboundError(RuntimeError):
    pass


class FounderMissing(OutboundError):
    """No founder in the directory: there is nobody Atlas may write to."""


class UnknownMessage(OutboundError):
    pass


class MailMaybeSent(OutboundError):
    """The connection was lost during DATA: the server may have taken the mail. The one
    case that is not 'nothing left'; `send_to_founder` turns it into `send_unknown`."""


class MailNotSent(OutboundError):
    """Nothing left the mailbox; calling again is safe. `transient` says whether to retry."""

    def __init__(self, reason: str, *, transient: bool, code: int | None = None):
        super().__init__(reason)
        self.transient = transient
        self.code = code


@dataclass(frozen=True)
class Skipped:
    name: str      # the file's name only: paths are the fleet's, not the mail's business
    reason: str    # missing | unreadable | too_large


@dataclass(frozen=True)
class BuiltMail:
    message: EmailMessage
    rfc_message_id: str
    attached: tuple[str, ...]
    skipped: tuple[Skipped, ...]

    def as_bytes(self) -> bytes:
        return self.message.as_bytes(policy=policy.SMTP)  # CRLF, as IMAP and SMTP want


@dataclass(frozen=True)
class SendResult:
    outcome: SendOutcome
    status: OutboundStatus
    rfc_message_id: str
    draft_uid: int | None
    skipped: tuple[Skipped, ...] = ()  # known when this call built the mail
    error: str | None = None


# -- the pure core -------------------------------------------------------------------------

def check_kind(kind: str) -> str:
    if not KIND_RE.match(kind):
        raise ValueError(f"mail kind must be kebab-case ([a-z0-9-]), got {kind!r}")
    return kind


def _domain(address: str) -> str:
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        raise OutboundError(f"not an email address: {address!r}")
    return domain.lower()


def rfc_message_id(kind: str, message_db_id: int, original_message_id: str | None,
                   from_address: str) -> str:
    """`<atlas-{kind}-{message id}.{h}@{from domain}>`: the same message and kind always give
    the same id. `h` hashes the original's Message-ID so that ids reused by another database
    (a restore, a second install) do not collide with mail already in the founder's inbox."""
    h = hashlib.sha256((original_message_id or "").encode("utf-8")).hexdigest()[:12]
    return f"<atlas-{check_kind(kind)}-{int(message_db_id)}.{h}@{_domain(from_address)}>"


def subject_line(subject: str) -> str:
    """One line (a CR/LF in a header is an injection), prefixed once."""
    flat = " ".join(subject.split())
    if flat.lower().startswith(SUBJECT_PREFIX.strip().lower()):
        flat = flat[len(SUBJECT_PREFIX.strip()):].lstrip()
    return SUBJECT_PREFIX + flat if flat else SUBJECT_PREFIX.strip()


_MSGID_RE = re.compile(r"<[^<>\s]+>")


def message_ids(value: str | None) -> list[str]:
    found = _MSGID_RE.findall(value or "")
    bare = (value or "").strip()
    if not found and bare and not re.search(r"[\s<>]", bare):
        return [f"<{bare}>"]  # an id stored without its angle brackets
    return found


def _read_attachments(paths: Sequence[Path]) -> tuple[list[tuple[str, bytes]], list[Skipped]]:
    kept: list[tuple[str, bytes]] = []
    skipped: list[Skipped] = []
    total = 0
    for p in map(Path, paths):
        if not p.is_file():
            skipped.append(Skipped(p.name, "missing"))
            continue
        try:
            size = p.stat().st_size
            if size > MAX_ATTACHMENT_BYTES or total + size > MAX_ATTACHMENTS_BYTES:
                skipped.append(Skipped(p.name, "too_large"))
                continue
            data = p.read_bytes()
        except FileNotFoundError:
            skipped.append(Skipped(p.name, "missing"))
            continue
        except OSError:
            skipped.append(Skipped(p.name, "unreadable"))
            continue
        total += len(data)
        kept.append((p.name, data))
    return kept, skipped


def build(kind: str, message_db_id: int, original_message_id_header: str | None,
          founder_address: str, from_address: str, subject: str, text: str, html: str | None,
          attachments: Sequence[Path], *, references: Sequence[str] = (),
          founder_name: str | None = None) -> BuiltMail:
    """The mail, threaded under the original (`In-Reply-To`, `References` = the original's
    chain + its id). Files in `attachments` that are missing, unreadable or over
    `MAX_ATTACHMENT_BYTES` are left out and listed in `skipped`."""
    mid = rfc_message_id(kind, message_db_id, original_message_id_header, from_address)
    msg = EmailMessage(policy=policy.SMTP)
    msg["From"] = Address(SENDER_NAME, addr_spec=from_address)
    msg["To"] = Address(" ".join((founder_name or "").split()), addr_spec=founder_address)
    msg["Subject"] = subject_line(subject)
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = mid
    original = message_ids(original_message_id_header)
    if original:
        chain = [r for r in references if r not in original][-(MAX_REFERENCES - 1):] + original[:1]
        msg["In-Reply-To"] = original[0]
        msg["References"] = " ".join(chain)
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation reply loops
    msg["X-Synedre-Kind"] = kind
    # quoted-printable: 7-bit safe on any relay, and French text stays readable in the source
    msg.set_content(text, cte="quoted-printable")
    kept, skipped = _read_attachments(attachments)
    inline = {n for n, _ in kept if html is not None and f"cid:{content_id(n)}" in html}
    if html is not None:
        msg.add_alternative(html, subtype="html", cte="quoted-printable")
        html_part = list(msg.iter_parts())[-1]
        for name, data in kept:  # text/html becomes multipart/related: the HTML, then its images
            if name in inline:
                html_part.add_related(data, *_mime_type(name), cid=f"<{content_id(name)}>", filename=name,
                                      disposition="inline")
    for name, data in kept:
        if name not in inline:
            msg.add_attachment(data, *_mime_type(name), filename=name)
    return BuiltMail(msg, mid, tuple(n for n, _ in kept), tuple(skipped))


def content_id(filename: str) -> str:
    """The Content-ID (no angle brackets) of an attached file named `filename`: an HTML part
    that shows it as `<img src="cid:...">` gets it inline, in a multipart/related beside
    the HTML (`build`); a file the HTML does not name stays an attachment."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(filename).name).strip("-.") + "@atlas.synedre.invalid"


def _mime_type(name: str) -> tuple[str, str]:
    ctype, _ = mimetypes.guess_type(name)
    maintype, _, subtype = (ctype or "application/octet-stream").partition("/")
    return maintype, subtype


def appenduid(response: bytes | str | None) -> tuple[int, int] | None:
    """(UIDVALIDITY, UID) from an APPEND reply `[APPENDUID v u]` (RFC 4315), else None."""
    if isinstance(response, str):
        response = response.encode()
    m = re.search(rb"\[APPENDUID (\d+) (\d+)\]", response or b"", re.I)
    return (int(m.group(1)), int(m.group(2))) if m else None


# -- SQL -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Context:
    founder_address: str
    founder_name: str
    atlas_address: str
    original_id: str | None       # None when the original had no Message-ID of its own
    references: tuple[str, ...]


def _audit(conn: Conn, message_id: int, event: str, **detail: Any) -> None:
    conn.execute("INSERT INTO synedre.audit_log (message_id, event, detail) VALUES (%s, %s, %s)",
                 (message_id, event, Jsonb(detail)))


def _founder(conn: Conn) -> Row:
    row = conn.execute("SELECT name, emails, atlas_address FROM synedre.founder").fetchone()
    if row is None or not row["emails"]:
        raise FounderMissing("no founder address in synedre.founder (synedre directory import)")
    return row


def _context(conn: Conn, message_db_id: int) -> _Context:
    founder = _founder(conn)
    original = conn.execute(
        "SELECT message_id, message_id_synthetic, headers FROM synedre.raw_messages WHERE id = %s",
        (message_db_id,)).fetchone()
    if original is None:
        raise UnknownMessage(f"no message {message_db_id}")
    refs = [i for name, value in original["headers"] if name.lower() == "references"
            for i in message_ids(value)]
    return _Context(founder["emails"][0], founder["name"], founder["atlas_address"],
                    None if original["message_id_synthetic"] else original["message_id"], tuple(refs))


_CLAIM_DRAFT = f"""
INSERT INTO synedre.outbound_mail AS o (message_id, kind, mailbox, rfc_message_id, status, claimed_at)
VALUES (%(mid)s, %(kind)s, %(mailbox)s, %(rfc)s, '{OutboundStatus.DRAFTING}', now())
ON CONFLICT (message_id, kind) DO UPDATE
   SET attempts = o.attempts + 1, claimed_at = now(), updated_at = now()
 WHERE o.status = '{OutboundStatus.DRAFTING}'
   AND (o.claimed_at IS NULL OR o.claimed_at < now() - make_interval(secs => %(lease)s))
RETURNING o.*"""

_STUCK_SENDING = f"""
UPDATE synedre.outbound_mail
   SET status = '{OutboundStatus.SEND_UNKNOWN}', updated_at = now(),
       error = 'the send claimed at ' || claimed_at || ' never finished: it may have left'
 WHERE message_id = %(mid)s AND kind = %(kind)s AND status = '{OutboundStatus.SENDING}'
   AND claimed_at < now() - make_interval(secs => %(lease)s)
RETURNING *"""


def _claim(conn: Conn, message_db_id: int, kind: str, mailbox: str, rfc: str) -> tuple[Row, bool]:
    """The row, and whether this call now owns its `drafting` claim. A `sending` row past
    its lease becomes `send_unknown` here, with its audit row."""
    args = {"mid": message_db_id, "kind": kind, "mailbox": mailbox, "rfc": rfc,
            "lease": DRAFT_LEASE_S}
    try:
        with conn.transaction():  # a savepoint, for the race below
            row = conn.execute(_CLAIM_DRAFT, args).fetchone()
    except psycopg.errors.UniqueViolation:
        # Two first INSERTs passed the claim's conflict check at once: the second then fails on
        # the Message-ID's own unique index, which ON CONFLICT does not arbitrate. The first has
        # committed by now (the violation waits for it): the same claim finds its row.
        row = conn.execute(_CLAIM_DRAFT, args).fetchone()
    if row is not None:
        return row, True
    stuck = conn.execute(_STUCK_SENDING, {**args, "lease": SEND_LEASE_S}).fetchone()
    if stuck is not None:
        _audit(conn, message_db_id, "mail_send_unknown", kind=kind, rfc_message_id=stuck["rfc_message_id"],
               attempt=stuck["attempts"], reason="stale_sending_claim")
        return stuck, False
    row = conn.execute("SELECT * FROM synedre.outbound_mail WHERE message_id = %s AND kind = %s",
                       (message_db_id, kind)).fetchone()
    assert row is not None  # the INSERT above conflicted with it
    return row, False


def _draft_saved(conn: Conn, row: Row, folder: str, uidvalidity: int, uid: int,
                 skipped: Sequence[Skipped]) -> Row | None:
    saved = conn.execute(
        f"""UPDATE synedre.outbound_mail
              SET status = '{OutboundStatus.DRAFT_SAVED}', draft_folder = %s, draft_uidvalidity = %s, draft_uid = %s,
                  claimed_at = NULL, error = NULL, updated_at = now()
            WHERE id = %s AND status = '{OutboundStatus.DRAFTING}' AND attempts = %s RETURNING *""",
        (folder, uidvalidity, uid, row["id"], row["attempts"])).fetchone()
    if saved is not None:
        _audit(conn, row["message_id"], "mail_draft_saved", kind=row["kind"],
               rfc_message_id=row["rfc_message_id"], folder=folder, draft_uid=uid,
               skipped=[{"name": s.name, "reason": s.reason} for s in skipped])
    return saved


def _release(conn: Conn, row: Row, status: OutboundStatus, error: str, event: str, **detail: Any) -> None:
    """Give a claim back (nothing left the mailbox): `drafting` or `draft_saved`, unclaimed."""
    released = conn.execute(
        f"""UPDATE synedre.outbound_mail SET status = %s, claimed_at = NULL, error = %s,
                  updated_at = now(),
                  draft_uid = CASE WHEN %s::text = '{OutboundStatus.DRAFTING}' THEN NULL ELSE draft_uid END
            WHERE id = %s AND status = %s AND attempts = %s RETURNING id""",
        (status, error[:2000], status, row["id"], row["status"], row["attempts"])).fetchone()
    if released is not None:
        _audit(conn, row["message_id"], event, kind=row["kind"], rfc_message_id=row["rfc_message_id"],
               attempt=row["attempts"], error=error[:500], **detail)


def _claim_send(conn: Conn, row: Row) -> tuple[Row, str] | None:
    """`draft_saved -> sending` for one caller; the recipient read again in that transaction."""
    claimed = conn.execute(
        f"""UPDATE synedre.outbound_mail SET status = '{OutboundStatus.SENDING}', attempts = attempts + 1,
                  claimed_at = now(), updated_at = now()
            WHERE id = %s AND status = '{OutboundStatus.DRAFT_SAVED}' RETURNING *""", (row["id"],)).fetchone()
    if claimed is None:
        return None
    return claimed, _founder(conn)["emails"][0]


def _mark_sent(conn: Conn, row: Row, smtp_reply: str) -> None:
    # Not only from `sending`: a slow send whose lease ran out (send_unknown), or that an
    # operator meanwhile declared not sent (draft_saved, no newer claim: same attempt), knows
    # the truth it learned from the server.
    sent = conn.execute(
        f"""UPDATE synedre.outbound_mail SET status = '{OutboundStatus.SENT}', sent_at = now(), claimed_at = NULL,
                  error = NULL, updated_at = now()
            WHERE id = %s AND attempts = %s
              AND status IN ('{OutboundStatus.SENDING}', '{OutboundStatus.SEND_UNKNOWN}',
                             '{OutboundStatus.DRAFT_SAVED}')
            RETURNING id""",
        (row["id"], row["attempts"])).fetchone()
    if sent is not None:
        _audit(conn, row["message_id"], "mail_sent", kind=row["kind"], rfc_message_id=row["rfc_message_id"],
               draft_uid=row["draft_uid"], attempt=row["attempts"], smtp_reply=smtp_reply[:200])


def _mark_unknown(conn: Conn, row: Row, error: str) -> Row | None:
    unknown = conn.execute(
        f"""UPDATE synedre.outbound_mail SET status = '{OutboundStatus.SEND_UNKNOWN}', error = %s, updated_at = now()
            WHERE id = %s AND status = '{OutboundStatus.SENDING}' AND attempts = %s RETURNING *""",
        (error[:2000], row["id"], row["attempts"])).fetchone()
    if unknown is not None:
        _audit(conn, row["message_id"], "mail_send_unknown", kind=row["kind"],
               rfc_message_id=row["rfc_message_id"], attempt=row["attempts"], reason="lost_during_data",
               error=error[:500])
    return unknown


# -- IMAP ----------------------------------------------------------------------------------

_IMAP_ERRORS = (IMAPClientError, OSError)



def _folder(client: IMAPClient, special: bytes, default: str) -> str:
    """The folder the server flags (RFC 6154) or names usually; created when there is none."""
    found = client.find_special_folder(special)
    if found:
        return str(found)
    if not client.folder_exists(default):
        try:
            client.create_folder(default)
        except IMAPClientError:
            if not client.folder_exists(default):  # else: a concurrent caller made it
                raise
    return default


def _find(client: IMAPClient, folder: str, rfc: str) -> tuple[int, int] | None:
    """(UIDVALIDITY, UID) of the newest message in `folder` with that Message-ID."""
    selected = client.select_folder(folder, readonly=True)
    uids = client.search(["HEADER", "Message-ID", rfc])
    return (int(selected[b"UIDVALIDITY"]), max(uids)) if uids else None


def _append_draft(client: IMAPClient, built: BuiltMail, look_first: bool) -> tuple[str, int, int]:
    folder = _folder(client, DRAFTS, DRAFTS_FOLDER)
    if look_first:  # a claim taken over from a caller that may have appended already
        found = _find(client, folder, built.rfc_message_id)
        if found:
            return folder, found[0], found[1]
    response = client.append(folder, built.as_bytes(), flags=(DRAFT,))
    uid = appenduid(response)
    if uid is None:  # no UIDPLUS: the Message-ID is ours alone, find it
        uid = _find(client, folder, built.rfc_message_id)
        if uid is None:
            raise MailNotSent(f"the draft appended to {folder} cannot be found again", transient=True)
    return folder, uid[0], uid[1]


def _fetch_draft(client: IMAPClient, row: Row) -> tuple[int, bytes] | None:
    """The draft's bytes by its UID, checked against its Message-ID; found again by that
    header if the folder's UIDVALIDITY changed. None: the draft is gone."""
    folder, rfc = row["draft_folder"], row["rfc_message_id"]
    if not client.folder_exists(folder):
        return None
    selected = client.select_folder(folder, readonly=True)
    uid = row["draft_uid"]
    if int(selected[b"UIDVALIDITY"]) != row["draft_uidvalidity"]:
        found = _find(client, folder, rfc)
        if found is None:
            return None
        uid = found[1]
    raw = client.fetch([uid], ["BODY.PEEK[]"]).get(uid, {}).get(b"BODY[]")
    if raw is None or BytesHeaderParser().parsebytes(raw).get("Message-ID", "").strip() != rfc:
        found = _find(client, folder, rfc)
        if found is None:
            return None
        uid = found[1]
        raw = client.fetch([uid], ["BODY.PEEK[]"]).get(uid, {}).get(b"BODY[]")
    return (uid, raw) if raw is not None else None


def _file_sent(box: Mailbox, row: Row, uid: int) -> None:
    """The draft goes to Sent, no longer `\\Draft`, as a mail client does. Not fatal: the
    mail is sent and recorded; a draft left behind is only untidy."""
    try:
        with box.session() as client:
            sent = _folder(client, SENT, SENT_FOLDER)
            client.select_folder(row["draft_folder"])
            client.remove_flags([uid], [DRAFT])
            client.add_flags([uid], [SEEN])
            if client.has_capability("MOVE"):
                client.move([uid], sent)
            else:
                client.copy([uid], sent)
                client.delete_messages([uid])
                if client.has_capability("UIDPLUS"):
                    client.uid_expunge([uid])
    except _IMAP_ERRORS as exc:
        log.warning("mail_file_sent_failed", message_id=row["message_id"], kind=row["kind"],
                    error=type(exc).__name__)


# -- SMTP ----------------------------------------------------------------------------------

def _smtp_reply(exc: smtplib.SMTPResponseException) -> str:
    msg = exc.smtp_error
    return f"{exc.smtp_code} {msg.decode(errors='replace') if isinstance(msg, bytes) else msg}"


def deliver(box: Mailbox, sender: str, recipient: str, raw: bytes,
            timeout: float = SMTP_TIMEOUT_S) -> str:
    """One SMTP session for one recipient; the server's final reply. Raises `MailNotSent`
    when the server certainly has nothing, `MailMaybeSent` when it might."""
    if not box.smtp_host:
        raise MailNotSent(f"mailbox {box.id!r} has no smtp_host in the registry", transient=False)
    implicit_tls = box.smtp_tls and box.smtp_port == 465
    tls = ssl.create_default_context()
    in_data = False
    smtp: smtplib.SMTP | None = None
    try:
        smtp = (smtplib.SMTP_SSL(box.smtp_host, box.smtp_port, timeout=timeout, context=tls)
                if implicit_tls else smtplib.SMTP(box.smtp_host, box.smtp_port, timeout=timeout))
        smtp.ehlo()
        if box.smtp_tls and not implicit_tls:
            if not smtp.has_extn("starttls"):  # fail closed: no password, no mail in clear
                raise MailNotSent(f"{box.smtp_host} offers no STARTTLS and smtp_tls is set", transient=False)
            smtp.starttls(context=tls)
            smtp.ehlo()
        if smtp.has_extn("auth"):
            box.smtp_login(smtp)  # the password, or XOAUTH2 with the mailbox's access token
        code, reply = smtp.mail(sender)
        if code != 250:
            raise smtplib.SMTPSenderRefused(code, reply, sender)
        code, reply = smtp.rcpt(recipient)
        if code not in (250, 251):
            raise smtplib.SMTPRecipientsRefused({recipient: (code, reply)})
        in_data = True
        code, reply = smtp.data(raw)  # returns the final reply, whatever it is
        in_data = False
        if code != 250:  # a reply, so a definite refusal: the server keeps nothing
            raise smtplib.SMTPDataError(code, reply)
        return f"{code} {reply.decode(errors='replace')}"
    except mailboxes.LoginRefused as exc:  # before MAIL: nothing left
        raise MailNotSent(str(exc), transient=False) from exc
    except smtplib.SMTPRecipientsRefused as exc:
        code = next(iter(exc.recipients.values()))[0]
        raise MailNotSent(f"recipient refused: {code}", transient=400 <= code < 500, code=code) from exc
    except smtplib.SMTPResponseException as exc:  # the server answered: it did not take it
        raise MailNotSent(f"SMTP refused: {_smtp_reply(exc)}"[:500], transient=400 <= exc.smtp_code < 500,
                          code=exc.smtp_code) from exc
    except (smtplib.SMTPException, OSError) as exc:
        if in_data:
            raise MailMaybeSent(f"connection lost during DATA: {type(exc).__name__}: {exc}") from exc
        raise MailNotSent(f"SMTP unreachable: {type(exc).__name__}: {exc}"[:500], transient=True) from exc
    finally:
        if smtp is not None:
            try:
                smtp.quit()
            except (smtplib.SMTPException, OSError):  # the mail's fate was settled before QUIT
                smtp.close()


# -- the facade ----------------------------------------------------------------------------

def _from_address(box: Mailbox, ctx: _Context) -> str:
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


def _save_draft(conn_factory: ConnFactory, box: Mailbox, row: Row, ctx: _Context, kind: str,
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
            folder, uidvalidity, uid = _append_draft(client, built, look_first=row["attempts"] > 1)
    except (*_IMAP_ERRORS, MailNotSent) as exc:
        with conn_factory() as conn:
            _release(conn, row, OutboundStatus.DRAFTING, f"{type(exc).__name__}: {exc}", "mail_draft_failed")
        if isinstance(exc, mailboxes.LoginRefused):
            raise MailNotSent(f"saving the draft failed: {exc}", transient=False) from exc
        raise MailNotSent(f"saving the draft failed: {type(exc).__name__}", transient=True) from exc
    with conn_factory() as conn:
        saved = _draft_saved(conn, row, folder, uidvalidity, uid, built.skipped)
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
            draft = _fetch_draft(client, row)
    except _IMAP_ERRORS as exc:
        with conn_factory() as conn:
            _release(conn, row, OutboundStatus.DRAFT_SAVED, f"{type(exc).__name__}: {exc}", "mail_send_deferred")
        if isinstance(exc, mailboxes.LoginRefused):
            raise MailNotSent(f"fetching the draft failed: {exc}", transient=False) from exc
        raise MailNotSent(f"fetching the draft failed: {type(exc).__name__}", transient=True) from exc
    if draft is None:
        with conn_factory() as conn:
            _release(conn, row, OutboundStatus.DRAFTING, "the draft is no longer in its folder", "mail_draft_missing")
        log.warning("mail_draft_missing", **bound)
        return None
    uid, raw = draft
    try:
        reply = deliver(box, from_address, recipient, raw)
    except MailNotSent as exc:
        with conn_factory() as conn:
            _release(conn, row, OutboundStatus.DRAFT_SAVED, str(exc), "mail_send_deferred",
                     code=exc.code, transient=exc.transient)
        log.warning("mail_not_sent", **bound, code=exc.code, transient=exc.transient)
        raise
    except MailMaybeSent as exc:
        with conn_factory() as conn:
            unknown = _mark_unknown(conn, row, str(exc))
        log.error("mail_send_unknown", **bound, reason="lost_during_data")
        return _result(unknown or {**row, "status": OutboundStatus.SEND_UNKNOWN}, SendOutcome.SEND_UNKNOWN)
    with conn_factory() as conn:
        _mark_sent(conn, row, reply)
    log.info("mail_sent", **bound, draft_uid=uid)
    _file_sent(box, row, uid)
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
        ctx = _context(conn, message_db_id)
        row = conn.execute("SELECT * FROM synedre.outbound_mail WHERE message_id = %s AND kind = %s",
                           (message_db_id, check_kind(kind))).fetchone()
    if row is None:
        raise OutboundError(f"no draft for message {message_db_id} kind {kind!r}")
    return _run(conn_factory, box.id, message_db_id, kind, None, None, None, (), send=True,
                box=box, ctx=ctx)


def _run(conn_factory: ConnFactory, mailbox_id: str, message_db_id: int, kind: str,
         subject: str | None, text: str | None, html: str | None, attachments: Sequence[Path], *,
         send: bool, box: Mailbox | None = None, ctx: _Context | None = None) -> SendResult:
    check_kind(kind)
    box = box or mailboxes.get(mailbox_id)
    if send and not box.smtp_host:
        raise mailboxes.RegistryError(f"mailbox {box.id!r} has no smtp_host: it cannot send")
    if ctx is None:
        with conn_factory() as conn:
            ctx = _context(conn, message_db_id)
    from_address = _from_address(box, ctx)
    rfc = rfc_message_id(kind, message_db_id, ctx.original_id, from_address)
    skipped: tuple[Skipped, ...] = ()
    for _ in range(_MAX_STEPS):
        with conn_factory() as conn:
            row, ours = _claim(conn, message_db_id, kind, box.id, rfc)
        status = OutboundStatus(row["status"])
        if ours:
            if subject is None or text is None:  # send_draft: no content to draft again
                with conn_factory() as conn:
                    _release(conn, row, OutboundStatus.DRAFTING, "no draft and no content to build one",
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
                claimed = _claim_send(conn, row)
            if claimed is None:  # another caller won the send
                continue
            result = _send(conn_factory, box, claimed[0], claimed[1], from_address)
            if result is None:  # the draft vanished: draft again, then send
                continue
            return SendResult(result.outcome, result.status, result.rfc_message_id, result.draft_uid,
                              skipped, result.error)
        return _passive(row)
    raise OutboundError(f"message {message_db_id} kind {kind!r}: no progress after {_MAX_STEPS} steps")


def resolve_unknown(conn_factory: ConnFactory, message_db_id: int, kind: str, *, was_sent: bool) -> OutboundStatus:
    """An operator's verdict on a `send_unknown` mail (checked in the founder's inbox or the
    relay's log): sent, or not sent, in which case the next call sends its draft."""
    with conn_factory() as conn:
        row = conn.execute(
            f"""UPDATE synedre.outbound_mail
                  SET status = CASE WHEN %(sent)s THEN '{OutboundStatus.SENT}' ELSE '{OutboundStatus.DRAFT_SAVED}' END,
                      sent_at = CASE WHEN %(sent)s THEN now() END,
                      claimed_at = NULL, updated_at = now()
                WHERE message_id = %(mid)s AND kind = %(kind)s AND status = '{OutboundStatus.SEND_UNKNOWN}'
                RETURNING *""", {"sent": was_sent, "mid": message_db_id, "kind": check_kind(kind)}).fetchone()
        if row is None:
            raise OutboundError(f"message {message_db_id} kind {kind!r} is not send_unknown")
        _audit(conn, message_db_id, "mail_resolved", kind=kind, rfc_message_id=row["rfc_message_id"],
               was_sent=was_sent)
    return OutboundStatus(row["status"])


__all__ = [
    "BuiltMail", "ConnFactory", "FounderMissing", "MailMaybeSent", "MailNotSent", "SendOutcome",
    "OutboundError", "SendResult", "Skipped", "OutboundStatus", "UnknownMessage", "appenduid", "build",
    "check_kind", "deliver", "resolve_unknown", "rfc_message_id", "save_draft", "send_draft",
    "send_to_founder", "subject_line",
]
