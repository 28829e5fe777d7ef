"""The mail itself, pure: threaded to the original email, `[Atlas] ` subject, text and HTML
parts, attachments (a missing file is skipped and reported), a Message-ID derived from the
message and the kind (SPEC §9.6). No I/O but reading the files to attach; the outbox
(synedre/mail/outbox.py) and the transport (synedre/mail/transport.py) do the rest.
"""
from __future__ import annotations

import hashlib
import mimetypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email import policy
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path

from synedre.mail.errors import OutboundError

SUBJECT_PREFIX = "[Atlas] "
SENDER_NAME = "Atlas"
KIND_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# Screenshots are proof, not payload: one too large is skipped like a missing one, and the
# whole mail stays under what common SMTP relays accept (25 MB, base64 included).
MAX_ATTACHMENT_BYTES = 8 * 1024 * 1024
MAX_ATTACHMENTS_BYTES = 16 * 1024 * 1024
MAX_REFERENCES = 20


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

