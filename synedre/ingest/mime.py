"""Parsing an RFC 5322 message into what ingestion stores. Pure functions, no I/O."""
from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.header import decode_header, make_header
from email.message import Message
from email.utils import getaddresses

SYNTHETIC_DOMAIN = "synthetic.synedre.invalid"
MAX_HEADERS_STORED = 500
MAX_DEFECTS_STORED = 50


class MessageParseError(Exception):
    """The bytes could not be parsed into a message; they are stored raw."""


@dataclass(frozen=True)
class Attachment:
    idx: int
    filename: str | None
    content_type: str
    payload: bytes = field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.payload).hexdigest()

    @property
    def stored_name(self) -> str:
        """A file name safe to create: never a path, never hidden, never empty."""
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", self.filename or "")[-80:].lstrip("._")
        return f"{self.idx:04d}-{base or 'part'}"


@dataclass(frozen=True)
class ParsedMessage:
    message_id: str
    synthetic_id: bool
    envelope_from: str | None
    from_values: list[str]
    subject: str | None
    headers: list[tuple[str, str]]
    attachments: list[Attachment]
    defects: list[str]


def clean(text: str | None) -> str | None:
    """Text PostgreSQL accepts: no NUL, no lone surrogates (from undecodable bytes)."""
    if text is None:
        return None
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace").replace("\x00", "\ufffd")


def synthetic_message_id(raw: bytes) -> str:
    """Deterministic: the same bytes always give the same id."""
    return f"<{hashlib.sha256(raw).hexdigest()[:40]}@{SYNTHETIC_DOMAIN}>"


def normalize_message_id(value: str | None) -> str | None:
    value = clean(" ".join((value or "").split()))
    return value[:998] if value else None


def _decode(value: str) -> str:
    try:
        return str(make_header(decode_header(value)))
    except Exception:  # unknown charset, bad encoded-word: keep the raw text
        return value


def _unfold(value: str) -> str:
    return re.sub(r"\r?\n[ \t]*", " ", value).strip()


def fallback_headers(raw: bytes) -> tuple[str, bool, str | None, str | None]:
    """Message-ID, synthetic flag, sender and subject by plain regex, for unparseable bytes."""
    head = raw[:65536].split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0].decode("latin-1")

    def first(name: str) -> str | None:
        m = re.search(rf"^{name}:[ \t]*(.*(?:\r?\n[ \t].*)*)", head, re.I | re.M)
        return clean(_unfold(m.group(1))) if m else None

    mid = normalize_message_id(first("Message-ID"))
    sender = first("From")
    addrs = [a.lower() for _, a in getaddresses([sender])] if sender else []
    return (mid or synthetic_message_id(raw), mid is None,
            addrs[0] if addrs and "@" in addrs[0] else None, first("Subject"))


def _attachments(msg: Message) -> list[Attachment]:
    found: list[Attachment] = []
    stack = [msg]  # explicit stack: deeply nested input must not hit the recursion limit
    while stack:
        part = stack.pop()
        ctype = part.get_content_type()
        if part.is_multipart() and ctype != "message/rfc822":
            payload = part.get_payload()
            if isinstance(payload, list):
                stack.extend(p for p in reversed(payload) if isinstance(p, Message))
            continue
        filename = part.get_filename(None)
        disposition = (part.get_content_disposition() or "").lower()
        if ctype == "message/rfc822":
            inner = part.get_payload()
            forwarded = inner[0] if isinstance(inner, list) and inner else None
            data = forwarded.as_bytes() if isinstance(forwarded, Message) else part.as_bytes()
            found.append(Attachment(len(found), clean(filename) or "forwarded.eml", ctype, data))
            continue
        is_body = part.get_content_maintype() == "text" and disposition != "attachment" and not filename
        if is_body or part is msg and part.get_content_maintype() == "text":
            continue
        decoded = part.get_payload(decode=True)
        if isinstance(decoded, bytes):
            data = decoded
        else:
            payload = part.get_payload()
            data = payload.encode("utf-8", "surrogateescape") if isinstance(payload, str) else b""
        found.append(Attachment(len(found), clean(filename), ctype, data))
    return found


def _defects(msg: Message) -> list[str]:
    names: list[str] = []
    for part in msg.walk():
        for d in getattr(part, "defects", []):
            if type(d).__name__ not in names:
                names.append(type(d).__name__)
    return names[:MAX_DEFECTS_STORED]


def parse(raw: bytes) -> ParsedMessage:
    """Parse what can be parsed. Raises MessageParseError only when nothing usable remains."""
    try:
        msg = message_from_bytes(raw, policy=policy.compat32)
        headers = [(clean(k) or "", clean(_unfold(_decode(str(v)))) or "")
                   for k, v in msg.items()[:MAX_HEADERS_STORED]]
        mid = normalize_message_id(msg.get("Message-ID") and str(msg.get("Message-ID")))
        from_values = [str(v) for v in msg.get_all("From", [])]
        addrs = [a.lower() for _, a in getaddresses(from_values) if "@" in a]
        subject = msg.get("Subject")
        return ParsedMessage(
            message_id=mid or synthetic_message_id(raw),
            synthetic_id=mid is None,
            envelope_from=clean(addrs[0]) if addrs else None,
            from_values=from_values,
            subject=clean(_unfold(_decode(str(subject)))) if subject is not None else None,
            headers=headers,
            attachments=_attachments(msg),
            defects=_defects(msg),
        )
    except Exception as exc:  # the stdlib parser raises many kinds on hostile input
        raise MessageParseError(f"{type(exc).__name__}: {exc}"[:500]) from exc


def body_text(raw: bytes) -> str:
    """The readable body: text/plain preferred, else text/html without its tags."""
    try:
        part = message_from_bytes(raw, policy=policy.default).get_body(("plain", "html"))
        text = part.get_content() if part is not None else ""
        html_part = part is not None and part.get_content_subtype() == "html"
    except Exception:  # an undecodable charset or broken MIME: the first leaf, decoded leniently
        leaf = message_from_bytes(raw, policy=policy.compat32)
        while leaf.is_multipart():
            children = leaf.get_payload()
            if not (isinstance(children, list) and children and isinstance(children[0], Message)):
                break
            leaf = children[0]
        data = leaf.get_payload(decode=True)
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else ""
        html_part = leaf.get_content_subtype() == "html"
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if html_part:
        text = re.sub(r"(?is)<(script|style).*?</\1>", " ", text)
        text = re.sub(r"(?i)<br\s*/?>|</p>|</div>", "\n", text)
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return clean(text.replace("\r\n", "\n")) or ""
