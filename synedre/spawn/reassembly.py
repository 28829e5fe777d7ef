"""The stream's reassembly: the pty's reads -> whole lines -> whole messages -> redacted
NDJSON lines and typed events, in batches (`Reassembler`, run in the launch's reader thread).

`stream.LineReader` makes lines of the reads and `stream.parse_event` types each object; what
this adds is holding a message's events until it has ended, so that a secret its blocks cut
is redacted whole, and the typed batch handed on (`launcher.run` hands it to its
`event_writer.EventWriter`).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from synedre.redact import Redactor
from synedre.redact.pieces import merge_pieces
from synedre.spawn.stream import Decoded, Event, LineReader, ResultMessage, StreamParseError, SystemInit, parse_event


@dataclass(frozen=True)
class UnparsedEvent:
    """A line `parse_event` refused (a known kind lacking a field): kept, with the reason."""
    error: str
    raw: dict[str, Any] = field(repr=False)
    tool_name: None = None

    @property
    def event_type(self) -> str:
        t = self.raw.get("type")
        return t if isinstance(t, str) else "unparsed"

    @property
    def subtype(self) -> str | None:
        s = self.raw.get("subtype")
        return s if isinstance(s, str) else None


AnyEvent = Event | UnparsedEvent
Batch = list[tuple[AnyEvent, dict[str, Any]]]


class Reassembler:
    """bytes -> redacted dicts -> NDJSON file + typed events, in the reader thread.

    However the stream cuts a secret, no stored form holds it whole (issue 14):
    - pty reads are reassembled into lines by `LineReader` before anything else;
    - a partial-message delta (`stream_event` / `content_block_delta`) is stored without
      its text: its delta keeps its type and the length of the strings it carried
      (`{"type": "text_delta", "chars": 42}`). The complete assistant message repeats that
      text, and halves of a secret in two deltas are caught by no redactor that sees
      them one string at a time;
    - the text and thinking blocks of one message (Claude Code writes one `assistant`
      event per block, sharing the message's id; one event may also carry several) are
      redacted joined as well (`redact.merge_pieces`). For that, from a message's first
      assistant event, events are held back, in order, until the message has ended: its
      `message_stop` (or the next `message_start`), a user, result or init event, or the
      end of the stream (`LineReader.closed`). The CLI streams a message's blocks in one
      go, so this holds events for the time the model writes one message; nothing is
      held when no assistant event is pending, so init and result (which end a message
      anyway) come out, with `on_session` and `result`, in the read that brought them.
    """

    def __init__(self, redactor: Redactor, ndjson: IO[bytes] | None, on_batch: Callable[[Batch], None],
                 on_session: Callable[[str], None] | None):
        self.reader = LineReader()
        self.redactor, self.ndjson, self.on_batch, self.on_session = redactor, ndjson, on_batch, on_session
        self.events = 0
        self.session_id: str | None = None
        self.result: ResultMessage | None = None
        self._held: list[dict[str, Any]] = []  # raw: never written before `_release`
        self._open = False  # an assistant event is held: its message may have more blocks

    def handle(self, objs: list[dict[str, Any]]) -> None:
        batch: Batch = []
        for obj in objs:
            self._held.append(obj)
            if obj.get("type") == "assistant":
                self._open = True
            elif not self._open or _ends_message(obj):
                self._release(batch)
        if self.reader.closed and self._held:
            self._release(batch)
        if not batch:
            return
        if self.ndjson:
            self.ndjson.flush()
        self.on_batch(batch)

    def _release(self, batch: Batch) -> None:
        # `_open`: whether `held` has an assistant event, the only kind with text blocks.
        held, self._held, any_assistant, self._open = self._held, [], self._open, False
        # Each message's text joined is redacted before its blocks: see `merge_pieces`.
        messages = [blocks for blocks in _text_blocks(held).values() if len(blocks) > 1] if any_assistant else []
        wholes = [self.redactor.redact_text("".join(raw for *_, raw in blocks)) for blocks in messages]
        # Redact first: nothing below, nor any file or callback, ever sees the raw line. What
        # nothing was hidden in comes back itself: a `Decoded` there keeps its line's text.
        safe = [self._redact(obj) for obj in held]
        for blocks, whole in zip(messages, wholes, strict=True):
            # redact_obj keeps the structure, and these keys (words: never remembered).
            found = [(n, _block_at(safe[n], i), key) for n, i, key, _ in blocks]
            alone = [b.get(key) if isinstance(b, dict) else None for _, b, key in found]
            for (n, b, key), text in zip(found, merge_pieces(whole, [a or "" for a in alone]), strict=True):
                if isinstance(b, dict) and isinstance(b.get(key), str) and b[key] != text:
                    b[key] = text
                    if type(safe[n]) is Decoded:  # its line's text no longer says what it holds
                        safe[n] = dict(safe[n])
        for obj in safe:
            try:
                event: AnyEvent = parse_event(obj)
            except StreamParseError as exc:
                event = UnparsedEvent(exc.message, obj)
            if self.ndjson:
                # What redaction left as it was is written as it came (a Decoded keeps its line).
                line = obj.json_text if type(obj) is Decoded else json.dumps(obj, ensure_ascii=False)
                self.ndjson.write(line.encode("utf-8") + b"\n")
            batch.append((event, obj))
            self.events += 1
            if isinstance(event, SystemInit) and self.session_id is None:
                self.session_id = event.session_id
                if self.on_session:  # at once: a timeout later must be resumable
                    self.on_session(event.session_id)
            elif isinstance(event, ResultMessage) and self.result is None:
                self.result = event
                self.session_id = self.session_id or event.session_id

    def _redact(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object redacted. A delta without its text is encoded here, once: its file line
        and its stored row are that text (`Decoded`) whenever redaction leaves it as it is."""
        short = _delta_lengths(obj)
        if short is not obj:
            short = Decoded(short, _ENCODE(short))
        return self.redactor.redact_obj(short)


def _refuse(obj: Any) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


# One C encoder for the reader's deltas, as json.dumps(obj, ensure_ascii=False) writes: dumps,
# and JSONEncoder.encode, build a new one on every call, which cost a third of each encoding.
_C_ENCODER = json.encoder.c_make_encoder and json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _refuse, json.encoder.encode_basestring, None, ": ", ", ", False, False, True)


def _ENCODE(obj: Any) -> str:  # noqa: N802 - a constant's name, as it was
    return "".join(_C_ENCODER(obj, 0)) if _C_ENCODER else json.dumps(obj, ensure_ascii=False)


def _ends_message(obj: dict[str, Any]) -> bool:
    """Whether no block of a message held so far can come after this event."""
    kind = obj.get("type")
    if kind == "stream_event":
        inner = obj.get("event")
        return isinstance(inner, dict) and inner.get("type") in ("message_stop", "message_start")
    return kind in ("user", "result") or (kind == "system" and obj.get("subtype") == "init")


def _delta_lengths(obj: dict[str, Any]) -> dict[str, Any]:
    """A content_block_delta without its text: the delta's type and the length of its strings."""
    if obj.get("type") != "stream_event" or not isinstance(inner := obj.get("event"), dict) \
            or inner.get("type") != "content_block_delta" or not isinstance(delta := inner.get("delta"), dict):
        return obj
    chars = 0
    for k, v in delta.items():
        if k != "type" and isinstance(v, str):
            chars += len(v)
    return {**obj, "event": {**inner, "delta": {"type": delta.get("type"), "chars": chars}}}


_TEXT_KEYS = {"text": "text", "thinking": "thinking"}  # block type -> the key of its text


def _text_blocks(held: list[dict[str, Any]]) -> dict[object, list[tuple[int, int, str, str]]]:
    """Per message (its id; an assistant event without one stands alone), in stream order:
    (event number, block number, the key of its text, the text) of its text and thinking
    blocks."""
    out: dict[object, list[tuple[int, int, str, str]]] = {}
    for n, obj in enumerate(held):
        message = obj.get("message")
        if obj.get("type") != "assistant" or not isinstance(message, dict) \
                or not isinstance(message.get("content"), list):
            continue
        mid = message.get("id")
        group = out.setdefault(mid if isinstance(mid, str) else ("event", n), [])
        for i, block in enumerate(message["content"]):
            kind = block.get("type") if isinstance(block, dict) else None
            key = _TEXT_KEYS.get(kind) if isinstance(kind, str) else None
            if key and isinstance(block.get(key), str):
                group.append((n, i, key, block[key]))
    return out


def _block_at(obj: dict[str, Any], i: int) -> Any:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content[i] if isinstance(content, list) and i < len(content) else None
