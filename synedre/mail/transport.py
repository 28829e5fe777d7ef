"""The transport: IMAP for the drafts (saved in Drafts with `\\Draft`, fetched back by UID,
filed in Sent once sent) and SMTP for the one send (SPEC §9.6). The mailbox registry alone
resolves hosts and the secret; nothing here touches the database.

`deliver` tells apart the two failures the outbox must not confuse: `MailNotSent` when the
server certainly has nothing (an error before DATA, or a definite refusal of it),
`MailMaybeSent` when the connection was lost during DATA.
"""
from __future__ import annotations

import re
import smtplib
import ssl
from email.parser import BytesHeaderParser

from imapclient import DRAFT, SEEN, IMAPClient
from imapclient.exceptions import IMAPClientError
from imapclient.imapclient import DRAFTS, SENT

from synedre import mailboxes
from synedre.db.types import Row
from synedre.log import log
from synedre.mail.compose import BuiltMail
from synedre.mail.errors import MailMaybeSent, MailNotSent
from synedre.mailboxes import Mailbox

# Folder names used when the server flags none with RFC 6154 special-use (nor a usual name).
DRAFTS_FOLDER = "Drafts"
SENT_FOLDER = "Sent"
SMTP_TIMEOUT_S = 30.0
IMAP_ERRORS = (IMAPClientError, OSError)


def appenduid(response: bytes | str | None) -> tuple[int, int] | None:
    """(UIDVALIDITY, UID) from an APPEND reply `[APPENDUID v u]` (RFC 4315), else None."""
    if isinstance(response, str):
        response = response.encode()
    m = re.search(rb"\[APPENDUID (\d+) (\d+)\]", response or b"", re.I)
    return (int(m.group(1)), int(m.group(2))) if m else None


def special_folder(client: IMAPClient, special: bytes, default: str) -> str:
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


def find(client: IMAPClient, folder: str, rfc: str) -> tuple[int, int] | None:
    """(UIDVALIDITY, UID) of the newest message in `folder` with that Message-ID."""
    selected = client.select_folder(folder, readonly=True)
    uids = client.search(["HEADER", "Message-ID", rfc])
    return (int(selected[b"UIDVALIDITY"]), max(uids)) if uids else None


def append_draft(client: IMAPClient, built: BuiltMail, look_first: bool) -> tuple[str, int, int]:
    folder = special_folder(client, DRAFTS, DRAFTS_FOLDER)
    if look_first:  # a claim taken over from a caller that may have appended already
        found = find(client, folder, built.rfc_message_id)
        if found:
            return folder, found[0], found[1]
    response = client.append(folder, built.as_bytes(), flags=(DRAFT,))
    uid = appenduid(response)
    if uid is None:  # no UIDPLUS: the Message-ID is ours alone, find it
        uid = find(client, folder, built.rfc_message_id)
        if uid is None:
            raise MailNotSent(f"the draft appended to {folder} cannot be found again", transient=True)
    return folder, uid[0], uid[1]


def fetch_draft(client: IMAPClient, row: Row) -> tuple[int, bytes] | None:
    """The draft's bytes by its UID, checked against its Message-ID; found again by that
    header if the folder's UIDVALIDITY changed. None: the draft is gone."""
    folder, rfc = row["draft_folder"], row["rfc_message_id"]
    if not client.folder_exists(folder):
        return None
    selected = client.select_folder(folder, readonly=True)
    uid = row["draft_uid"]
    if int(selected[b"UIDVALIDITY"]) != row["draft_uidvalidity"]:
        found = find(client, folder, rfc)
        if found is None:
            return None
        uid = found[1]
    raw = client.fetch([uid], ["BODY.PEEK[]"]).get(uid, {}).get(b"BODY[]")
    if raw is None or BytesHeaderParser().parsebytes(raw).get("Message-ID", "").strip() != rfc:
        found = find(client, folder, rfc)
        if found is None:
            return None
        uid = found[1]
        raw = client.fetch([uid], ["BODY.PEEK[]"]).get(uid, {}).get(b"BODY[]")
    return (uid, raw) if raw is not None else None


def file_sent(box: Mailbox, row: Row, uid: int) -> None:
    """The draft goes to Sent, no longer `\\Draft`, as a mail client does. Not fatal: the
    mail is sent and recorded; a draft left behind is only untidy."""
    try:
        with box.session() as client:
            sent = special_folder(client, SENT, SENT_FOLDER)
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
    except IMAP_ERRORS as exc:
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
