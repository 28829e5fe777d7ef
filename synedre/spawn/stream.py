"""Claude Code's stream-json output: bytes from a pty -> JSON objects -> typed events.

Pure code. The launch shell feeds pty reads to `LineReader`, redacts each object
(`synedre.redact`) *before* `parse_event`, so every event's `raw` is already
safe to persist.
"""
from __future__ import annotations

import json
import json.scanner
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

MAX_LINE_BYTES = 64 * 1024 * 1024
# Terminal control sequences (cursor show/hide…) the CLI writes to its tty. JSON escapes
# ESC inside strings, so a raw one is never part of the data and can be cut anywhere.
_CSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


class StreamParseError(ValueError):
    """A known event kind lacks a field we rely on; `raw` is kept so the caller can store it."""

    def __init__(self, message: str, raw: Any):
        super().__init__(message)
        self.message = message
        self.raw = raw


# --- content blocks ---------------------------------------------------------------

@dataclass(frozen=True)
class TextBlock:
    text: str


@dataclass(frozen=True)
class ThinkingBlock:
    thinking: str
    signature: str = ""


@dataclass(frozen=True)
class ToolUseBlock:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class ToolResultBlock:
    tool_use_id: str
    content: Any  # a string or a list of content dicts, as the tool returned it
    is_error: bool = False


@dataclass(frozen=True)
class OtherBlock:
    """A block kind this module does not model (images, server tools…): kept, not dropped."""
    type: str | None
    raw: dict[str, Any] = field(repr=False)


Block = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | OtherBlock


# --- events -------------------------------------------------------------------------

class _Event:
    """What persistence needs from every event: `event_type`, `subtype`, `tool_name`."""
    raw: dict[str, Any]

    @property
    def event_type(self) -> str:
        return self.raw["type"]

    @property
    def tool_name(self) -> str | None:
        return None


@dataclass(frozen=True)
class SystemInit(_Event):
    session_id: str
    model: str | None
    tools: list[str]
    cwd: str | None
    raw: dict[str, Any] = field(repr=False)
    subtype: ClassVar[str] = "init"


@dataclass(frozen=True)
class SystemEvent(_Event):
    """Any other system event: hook_started / hook_response, compact_boundary, status…"""
    subtype: str
    raw: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class AssistantMessage(_Event):
    content: list[Block]
    model: str | None
    raw: dict[str, Any] = field(repr=False)
    subtype: ClassVar[None] = None

    @property
    def tool_name(self) -> str | None:
        return next((b.name for b in self.content if isinstance(b, ToolUseBlock)), None)


@dataclass(frozen=True)
class UserMessage(_Event):
    content: list[Block]
    raw: dict[str, Any] = field(repr=False)
    subtype: ClassVar[None] = None

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]


@dataclass(frozen=True)
class StreamEvent(_Event):
    """A partial-message delta (--include-partial-messages); subtype is the inner event type."""
    raw: dict[str, Any] = field(repr=False)

    @property
    def subtype(self) -> str | None:
        inner = self.raw.get("event")
        return inner.get("type") if isinstance(inner, dict) else None


@dataclass(frozen=True)
class ResultMessage(_Event):
    subtype: str
    is_error: bool
    num_turns: int | None
    duration_ms: int | None
    total_cost_usd: float | None
    usage: dict[str, Any] | None
    session_id: str | None
    permission_denials: list[Any]
    result: str | None
    raw: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class UnknownEvent(_Event):
    """A kind a newer CLI may emit: stored as is rather than dropped."""
    type: str
    raw: dict[str, Any] = field(repr=False)

    @property
    def subtype(self) -> str | None:
        s = self.raw.get("subtype")
        return s if isinstance(s, str) else None


Event = SystemInit | SystemEvent | AssistantMessage | UserMessage | StreamEvent | ResultMessage \
    | UnknownEvent


def _req(obj: dict[str, Any], key: str, typ: type | tuple[type, ...], raw: dict[str, Any]) -> Any:
    value = obj.get(key)
    if not isinstance(value, typ):
        raise StreamParseError(f"{raw.get('type')} event: missing or invalid {key!r}", raw)
    return value


def _opt(obj: dict[str, Any], key: str, typ: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    # bool is an int in Python, but a `true` where a count is expected is not a count.
    return value if isinstance(value, typ) and not isinstance(value, bool) else None


def _block(b: Any, raw: dict[str, Any]) -> Block:
    if not isinstance(b, dict):
        raise StreamParseError(f"{raw.get('type')} event: content block is not an object", raw)
    match b.get("type"):
        case "text":
            return TextBlock(_req(b, "text", str, raw))
        case "thinking":
            return ThinkingBlock(_req(b, "thinking", str, raw), b.get("signature") or "")
        case "tool_use":
            tool_input = b.get("input")
            return ToolUseBlock(_req(b, "id", str, raw), _req(b, "name", str, raw),
                                tool_input if isinstance(tool_input, dict) else {})
        case "tool_result":
            return ToolResultBlock(_req(b, "tool_use_id", str, raw), b.get("content"),
                                   b.get("is_error") is True)
        case other:
            return OtherBlock(other if isinstance(other, str) else None, b)


def _blocks(message: dict[str, Any], raw: dict[str, Any]) -> list[Block]:
    content = message.get("content")
    if isinstance(content, str):  # a plain user turn, not a tool result
        return [TextBlock(content)]
    return [_block(b, raw) for b in _req(message, "content", list, raw)]


def parse_event(data: Any) -> Event:
    """One stream-json object -> one typed event; StreamParseError if a required field lacks."""
    if not isinstance(data, dict):
        raise StreamParseError(f"expected a JSON object, got {type(data).__name__}", data)
    match data.get("type"):
        case "system" if data.get("subtype") == "init":
            tools = data.get("tools")
            tools = tools if isinstance(tools, list) else []
            return SystemInit(_req(data, "session_id", str, data), _opt(data, "model", str),
                              [t for t in tools if isinstance(t, str)], _opt(data, "cwd", str), data)
        case "system":
            return SystemEvent(_req(data, "subtype", str, data), data)
        case "assistant":
            message = _req(data, "message", dict, data)
            return AssistantMessage(_blocks(message, data), _opt(message, "model", str), data)
        case "user":
            return UserMessage(_blocks(_req(data, "message", dict, data), data), data)
        case "stream_event":
            return StreamEvent(data)
        case "result":
            denials = data.get("permission_denials")
            return ResultMessage(
                subtype=_req(data, "subtype", str, data),
                # Required: success is decided on it, so a result without it must not pass.
                is_error=_req(data, "is_error", bool, data),
                num_turns=_opt(data, "num_turns", int),
                duration_ms=_opt(data, "duration_ms", int),
                total_cost_usd=_opt(data, "total_cost_usd", (int, float)),
                usage=_opt(data, "usage", dict),
                session_id=_opt(data, "session_id", str),
                permission_denials=denials if isinstance(denials, list) else [],
                result=_opt(data, "result", str),
                raw=data)
        case str() as other:
            return UnknownEvent(other, data)
        case _:
            raise StreamParseError("missing or non-string 'type'", data)


# --- bytes -> JSON objects -------------------------------------------------------------

def _reject_constant(name: str) -> Any:
    # NaN/Infinity are not JSON and PostgreSQL's jsonb refuses them: treat the line as noise.
    raise ValueError(f"non-standard JSON constant {name}")


class Decoded(dict[str, Any]):
    """A stream object as `LineReader` decoded it, with the JSON text of its line
    (`json_text`): stored as it came, it need not be encoded again (`Reassembler` keeps the
    text only for an object redaction returned unchanged; `launches.add_events` reads it).
    Whoever changes one in place must store a plain `dict(obj)` copy instead."""
    __slots__ = ("json_text",)

    def __init__(self, obj: dict[str, Any], json_text: str):
        _dict_init(self, obj)  # not super(): one of these per line, and its lookup showed
        self.json_text = json_text


_dict_init = dict.__init__


class LineReader:
    """Incremental NDJSON reader for a pty: feed raw chunks, get whole JSON objects back.

    A pty writes `\\r\\n` and may interleave stderr or terminal noise, so `\\r` and terminal
    control sequences are dropped, and a line that is not a JSON object is skipped and
    counted in `skipped`. A line is decoded only once complete, so a UTF-8 character
    split across reads is intact (0x0A never occurs inside a multi-byte sequence). A line
    over `max_line` bytes is dropped up to its newline and counted in `oversized`, never
    buffered without bound. `closed` is set by `close`: the stream has ended. Each object
    comes back as a `Decoded`, which keeps its line's text.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES):
        self.max_line = max_line
        self.skipped = 0
        self.oversized = 0
        self.closed = False
        self._chunks: list[bytes] = []  # joined once per line: no quadratic concatenation
        self._size = 0
        self._dropping = False
        # One decoder for the reader's lines (`json.loads` with an option builds a new one per
        # call), its scanner called directly: the line is stripped and starts with `{`, so
        # `decode`'s two whitespace matches around it (a third of its time) find nothing.
        # (typeshed types the C scanner class's argument as the class itself)
        self._scan = json.scanner.make_scanner(json.JSONDecoder(parse_constant=_reject_constant))  # type: ignore[arg-type]

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            if self._chunks or self._dropping or nl - start > self.max_line:
                self._append(data[start:nl])
                self._end_line(out)
            else:  # a line whole in this read (most of them): no buffering
                self._line(data[start:nl], out)
            start = nl + 1
        self._append(data[start:])
        return out

    def close(self) -> list[dict[str, Any]]:
        """Flush the final line the process wrote without a newline before exiting."""
        self.closed = True
        out: list[dict[str, Any]] = []
        self._end_line(out)
        return out

    def _append(self, piece: bytes) -> None:
        if self._dropping or not piece:
            return
        self._size += len(piece)
        if self._size > self.max_line:
            self.oversized += 1
            self._dropping = True
            self._chunks, self._size = [], 0
        else:
            self._chunks.append(piece)

    def _end_line(self, out: list[dict[str, Any]]) -> None:
        line = b"".join(self._chunks)
        dropped = self._dropping
        self._chunks, self._size, self._dropping = [], 0, False
        if not dropped:
            self._line(line, out)

    def _line(self, line: bytes, out: list[dict[str, Any]]) -> None:
        if b"\r" in line:
            line = line.replace(b"\r", b"")
        if b"\x1b" in line:
            line = _CSI.sub(b"", line)
        line = line.strip()
        if not line:
            return
        if not line.startswith(b"{"):
            self.skipped += 1
            return
        text = line.decode("utf-8", errors="replace")
        try:
            obj, end = self._scan(text, 0)
        except (StopIteration, ValueError, RecursionError):  # RecursionError: absurdly nested noise
            end = -1
        if end != len(text):  # not JSON, or more than one value
            self.skipped += 1
            return
        out.append(Decoded(obj, text))  # a line starting with `{` that decodes is an object
