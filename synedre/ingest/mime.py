"""Parsing an RFC 5322 message into what ingestion stores. Pure functions, no I/O."""
from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.header import decode_header, make_header
from email.message import Message
from email.utils import getaddresses
from enum import StrEnum

SYNTHETIC_DOMAIN = "synthetic.synedre.invalid"
MAX_HEADERS_STORED = 500
MAX_DEFECTS_STORED = 50
MAX_CHARSETS_STORED = 10

# A text body is binary garbage when both views of its first bytes say so:
# - as bytes, more than BINARY_CONTROL_RATIO of them are control bytes (BINARY_BYTES: NUL
#   and the C0 controls text never holds), and at least BINARY_MIN_CONTROLS, so one stray
#   NUL in a short note fails nothing. This view sees garbage whatever charset it claims.
# - decoded with the charset the part declares (latin-1, byte for byte, when Python has no
#   such text encoding), more than BINARY_CONTROL_RATIO of the characters are not text
#   (NON_TEXT: those controls, U+FFFD for an undecodable byte, private use). This view
#   spares text whose charset legitimately has NUL bytes: UTF-16, UTF-32.
# Random bytes are over both (len(BINARY_BYTES)/256 of them are controls); text is near 0.
BINARY_CONTROL_RATIO = 0.05
BINARY_MIN_CONTROLS = 8
# At most this many bytes of body text are examined, taken from the start of the text
# parts in order, so a 50 MB body or 2,000 parts cost no more than a short message.
BINARY_SAMPLE_BYTES = 64 * 1024
# Below 0x20 text holds TAB LF VT FF CR, and SO SI ESC (the ISO-2022 shifts); the rest of
# C0, and DEL, are binary. C1 (0x80-0x9F) is not: windows-1252 labelled latin-1 has it.
TEXT_CONTROLS = b"\t\n\v\f\r\x0e\x0f\x1b"
BINARY_BYTES = bytes(b for b in [*range(0x20), 0x7F] if b not in TEXT_CONTROLS)
NON_TEXT = re.compile(f"[{re.escape(BINARY_BYTES.decode('latin-1'))}\ufffd\ue000-\uf8ff]")


class MessageParseError(Exception):
    """The bytes could not be parsed into a message; they are stored raw."""


class Reason(StrEnum):
    """Why a delivery ends `parse_failed`: the `reason` of its `parse_failed` audit."""
    TOO_LARGE = "too_large"  # over Settings.max_message_bytes: not parsed at all
    UNPARSEABLE = "unparseable"  # the parser itself raised
    NO_HEADER_BLOCK = "no_header_block"
    NO_FROM = "no_from"
    BINARY_BODY = "binary_body"
    STORAGE_REFUSED = "storage_refused"  # PostgreSQL refused a parsed field: stored raw


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
class BodySample:
    """What the first BINARY_SAMPLE_BYTES of body text hold (see BINARY_CONTROL_RATIO)."""
    size: int = 0  # bytes examined
    controls: int = 0  # of which in BINARY_BYTES
    chars: int = 0  # characters those bytes decode to with the declared charsets
    non_text: int = 0  # of which matching NON_TEXT

    @property
    def binary(self) -> bool:
        return (self.controls >= BINARY_MIN_CONTROLS and self.controls > BINARY_CONTROL_RATIO * self.size
                and self.non_text > BINARY_CONTROL_RATIO * self.chars)


@dataclass(frozen=True)
class ParsedMime:
    message_id: str
    synthetic_id: bool
    envelope_from: str | None
    from_values: list[str]
    subject: str | None
    headers: list[tuple[str, str]]
    attachments: list[Attachment]
    defects: list[str]
    header_fields: int = 0  # fields with a name the parser found in the top header block
    body: BodySample = field(default_factory=BodySample)
    unknown_charsets: list[str] = field(default_factory=list)  # declared by text parts, unknown


@dataclass(frozen=True)
class ParseFailure:
    reason: Reason
    error: str  # for a reader: what was found


@dataclass(frozen=True)
class RejectionRule:
    """One reason to refuse a parsed message (as Mailman's moderation rules): `check`
    returns what it found when the rule fires, None otherwise."""
    name: Reason
    description: str
    check: Callable[[ParsedMime], str | None]


def _no_header_block(p: ParsedMime) -> str | None:
    # The parser takes every line up to the first one that is not `Name: value` (or a
    # continuation) as the header block; bytes that do not start with one have none.
    return None if p.header_fields else "no header field before the body"


def _no_from(p: ParsedMime) -> str | None:
    return None if any(v.strip() for v in p.from_values) else "no From: field, or only empty ones"


def _binary_body(p: ParsedMime) -> str | None:
    b = p.body
    if not b.binary:
        return None
    return (f"{b.controls} of the first {b.size} body bytes are control bytes and {b.non_text} of "
            f"their {b.chars} characters are not text (over {BINARY_CONTROL_RATIO:.0%} each)")


# In order: the first that fires is the reason recorded.
REJECTIONS: tuple[RejectionRule, ...] = (
    RejectionRule(Reason.NO_HEADER_BLOCK, "no parsable header block", _no_header_block),
    RejectionRule(Reason.NO_FROM, "no sender: the From: field is missing or empty", _no_from),
    RejectionRule(Reason.BINARY_BODY, "the text body is binary garbage (NUL and control characters)", _binary_body),
)


def rejection(parsed: ParsedMime) -> ParseFailure | None:
    """Why this message must end `parse_failed` and never reach the LLM, if it must."""
    for rule in REJECTIONS:
        found = rule.check(parsed)
        if found is not None:
            return ParseFailure(rule.name, found)
    return None


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


def _is_body(part: Message, top: Message) -> bool:
    """A text part read as the message's body, not kept as an attachment."""
    if part.get_content_maintype() != "text":
        return False
    return part is top or ((part.get_content_disposition() or "").lower() != "attachment"
                           and not part.get_filename(None))


def _body_parts(msg: Message) -> Iterator[Message]:
    """The text parts of the body, in order; forwarded messages are attachments, not body."""
    stack = [msg]
    while stack:
        part = stack.pop()
        if part.get_content_type() == "message/rfc822":
            continue
        if part.is_multipart():
            payload = part.get_payload()
            if isinstance(payload, list):
                stack.extend(p for p in reversed(payload) if isinstance(p, Message))
        elif _is_body(part, msg):
            yield part


def _known_charset(name: str) -> bool:
    try:
        "a".encode(name, "replace")  # not b"".decode(): it answers "" for any name
    except (LookupError, ValueError):  # "is not a text encoding" is a LookupError too
        return False
    return True


def _decode_text(data: bytes, charset: str | None) -> str:
    if charset:
        try:
            return data.decode(charset, "replace")
        except (LookupError, ValueError):  # a codec refusing "replace" (UnicodeError is a ValueError)
            pass
    return data.decode("latin-1")


def _body_sample(msg: Message) -> tuple[BodySample, list[str]]:
    """The body text's first bytes, measured, and the charsets it declares that are unknown."""
    size = controls = chars = non_text = 0
    unknown: list[str] = []
    for part in _body_parts(msg):
        charset = part.get_content_charset()
        if charset and not _known_charset(charset):
            name = clean(charset[:64]) or ""
            if name not in unknown and len(unknown) < MAX_CHARSETS_STORED:
                unknown.append(name)
            charset = None
        if size >= BINARY_SAMPLE_BYTES:
            continue  # the sample is full; the charsets are still listed
        data = part.get_payload(decode=True)
        if not isinstance(data, bytes):
            continue
        data = data[:BINARY_SAMPLE_BYTES - size]
        text = _decode_text(data, charset)
        size += len(data)
        controls += len(data) - len(data.translate(None, BINARY_BYTES))
        chars += len(text)
        non_text += sum(1 for _ in NON_TEXT.finditer(text))
    return BodySample(size, controls, chars, non_text), unknown


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
        if ctype == "message/rfc822":
            inner = part.get_payload()
            forwarded = inner[0] if isinstance(inner, list) and inner else None
            data = forwarded.as_bytes() if isinstance(forwarded, Message) else part.as_bytes()
            found.append(Attachment(len(found), clean(filename) or "forwarded.eml", ctype, data))
            continue
        if _is_body(part, msg):
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


def parse(raw: bytes) -> ParsedMime:
    """Parse what can be parsed. Raises MessageParseError only when nothing usable remains."""
    try:
        msg = message_from_bytes(raw, policy=policy.compat32)
        headers = [(clean(k) or "", clean(_unfold(_decode(str(v)))) or "")
                   for k, v in msg.items()[:MAX_HEADERS_STORED]]
        mid = normalize_message_id(msg.get("Message-ID") and str(msg.get("Message-ID")))
        from_values = [str(v) for v in msg.get_all("From", [])]
        addrs = [a.lower() for _, a in getaddresses(from_values) if "@" in a]
        subject = msg.get("Subject")
        body, unknown = _body_sample(msg)
        return ParsedMime(
            message_id=mid or synthetic_message_id(raw),
            synthetic_id=mid is None,
            envelope_from=clean(addrs[0]) if addrs else None,
            from_values=from_values,
            subject=clean(_unfold(_decode(str(subject)))) if subject is not None else None,
            headers=headers,
            attachments=_attachments(msg),
            defects=_defects(msg),
            header_fields=sum(1 for k in msg.keys() if k.strip()),
            body=body,
            unknown_charsets=unknown,
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
