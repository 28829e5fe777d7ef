"""A local, scripted Anthropic Messages API for running the real ``claude`` CLI offline.

The CLI (``@anthropic-ai/claude-code``) talks to whatever ``ANTHROPIC_BASE_URL`` points
at, with any ``ANTHROPIC_API_KEY``. This module serves that API from a stdlib
``ThreadingHTTPServer`` on a free loopback port, and plays a scripted "model": each
step of the script is the content of one assistant turn (text and ``tool_use`` blocks,
so the real CLI really runs Bash / Write in the real working tree), or a ``Sleep`` that
keeps the model silent for a while before its next answer.

Main conversation requests and the others are told apart by body and headers: the
agent loop always sends the tool list (with ``Bash``) and no ``x-claude-code-agent-id``
header; the CLI's side requests (title or topic detection, quota probes, summaries…)
carry no tools, or no Bash, and subagents (the Agent/Task tool) send their own tool
list *with* Bash but always under an ``x-claude-code-agent-id`` header (observed with
2.1.332). Auxiliary and subagent requests get a short harmless text with stop_reason
``end_turn`` and never advance the script.

The step answered for a main request is derived from the conversation it carries (the
number of assistant messages already in it), not from a counter, so a request the CLI
retries gets the same answer again instead of skipping a step.

    model = ScriptedModel([[bash("git status")], [text("done")]])
    api = start_claude_api(model)
    ...  # ANTHROPIC_BASE_URL=api.url
    api.stop()
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

DEFAULT_FINAL_TEXT = "Done."
AUX_TEXT = "Scripted run"
# Chunk size for streaming a text or a tool input as several deltas, like the real API.
DELTA_CHUNK = 2048


@dataclass(frozen=True)
class Sleep:
    """The model stays silent this long before answering the next main request. ``once``:
    only the first request for that step waits; a second one (the same session resumed
    after the agent was stopped while it waited) is answered at once."""

    seconds: float
    once: bool = False


@dataclass(frozen=True)
class Bill:
    """The next answer reports this many input tokens in its usage: the CLI prices what a run
    spends from the usage (its `result`'s total_cost_usd, its budget), so a test makes a step
    cost what it needs (500,000 tokens: about 1 USD on the CLI's default Sonnet)."""

    input_tokens: int


@dataclass(frozen=True)
class ApiError:
    """The API refuses the request for this step: `status` with an error body of `type` and
    `message`, as the real API shapes it (404 not_found_error, 401 authentication_error,
    429 rate_limit_error, 529 overloaded_error…)."""

    status: int
    type: str
    message: str


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def bash(command: str, description: str | None = None) -> dict[str, Any]:
    inp: dict[str, Any] = {"command": command}
    if description:
        inp["description"] = description
    return {"type": "tool_use", "name": "Bash", "input": inp}


def write(file_path: str, content: str) -> dict[str, Any]:
    return {"type": "tool_use", "name": "Write", "input": {"file_path": file_path, "content": content}}


@dataclass
class Turn:
    """One assistant answer: its content blocks, and how long to stay silent first."""

    blocks: list[dict[str, Any]]
    delay: float = 0.0
    delay_once: bool = False
    error: ApiError | None = None
    input_tokens: int | None = None  # the usage it reports (see Bill); else estimated from the request

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(b.get("type") == "tool_use" for b in self.blocks) else "end_turn"


class ScriptedModel:
    """The model's side of the conversation, step by step.

    ``turns`` is a list whose items are either a list of content blocks (one assistant
    answer), a ``Sleep`` (silence before the next answer) or a ``Bill`` (the next answer's
    usage). Once the script is spent,
    every further main request gets ``final_text`` with stop_reason ``end_turn``; put a
    text-only step last to choose the closing words yourself.
    """

    def __init__(self, turns: list[list[dict[str, Any]] | Sleep | ApiError | Bill],
                 final_text: str = DEFAULT_FINAL_TEXT):
        self.turns: list[Turn] = []
        pending, once, billed = 0.0, False, None
        for step in turns:
            if isinstance(step, Sleep):
                pending, once = pending + step.seconds, once or step.once
                continue
            if isinstance(step, Bill):
                billed = step.input_tokens
                continue
            if isinstance(step, ApiError):  # every request for this step is refused, retries included
                self.turns.append(Turn([], pending, once, error=step))
                pending, once = 0.0, False
                continue
            blocks = [dict(b) for b in step]
            for b in blocks:
                if b.get("type") not in ("text", "tool_use"):
                    raise ValueError(f"unsupported block type: {b.get('type')!r}")
            self.turns.append(Turn(blocks, pending, once, input_tokens=billed))
            pending, once, billed = 0.0, False, None
        self.final = Turn([text(final_text)], pending, once)
        self._waited: set[int] = set()
        self._lock = threading.Lock()

    def turn(self, index: int) -> Turn:
        return self.turns[index] if index < len(self.turns) else self.final

    def delay(self, index: int) -> float:
        """How long to stay silent before answering the request for step `index`."""
        turn = self.turn(index)
        with self._lock:
            if turn.delay_once and index in self._waited:
                return 0.0
            self._waited.add(index)
        return turn.delay


class PerLaunch:
    """Several launches against one API: each conversation gets the script `pick` chooses
    from its first message (the step index restarts with every conversation)."""

    def __init__(self, pick: Callable[[str], ScriptedModel]):
        self.pick = pick

    def for_request(self, body: dict[str, Any]) -> ScriptedModel:
        messages = body.get("messages") or [{}]
        return self.pick(json.dumps(messages[0], ensure_ascii=False))


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    kind: str  # "main", "aux", "subagent", "count_tokens" or "other"
    at: float
    step: int | None = None  # index of the scripted turn answered (main requests)
    status: int = 200

    @property
    def tools(self) -> list[str]:
        if isinstance(self.body, dict):
            return [t.get("name", "") for t in self.body.get("tools") or [] if isinstance(t, dict)]
        return []

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    def tool_results(self) -> list[dict[str, Any]]:
        """The tool_result blocks of the last user message of a messages request."""
        if not isinstance(self.body, dict):
            return []
        messages = self.body.get("messages") or []
        if not messages or messages[-1].get("role") != "user":
            return []
        content = messages[-1].get("content")
        if not isinstance(content, list):
            return []
        return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


SUBAGENT_HEADER = "x-claude-code-agent-id"


def is_main_request(body: Any, headers: dict[str, str] | None = None) -> bool:
    """The agent loop's requests carry the tool list, Bash included; side requests don't.

    Subagents carry Bash too, but identify themselves with ``x-claude-code-agent-id``.
    """
    if not isinstance(body, dict):
        return False
    if headers and any(k.lower() == SUBAGENT_HEADER for k in headers):
        return False
    tools = body.get("tools")
    if not isinstance(tools, list):
        return False
    return any(isinstance(t, dict) and t.get("name") == "Bash" for t in tools)


def assistant_turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")


def _estimate_tokens(body: Any) -> int:
    return max(1, len(json.dumps(body, ensure_ascii=False)) // 4) if body is not None else 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    model: ScriptedModel
    requests: list[RecordedRequest]
    lock: threading.Lock
    stopping: threading.Event


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    # -- plumbing ---------------------------------------------------------------------
    def _read_body(self) -> tuple[bytes, Any]:
        raw = b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            raw = b"".join(chunks)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
        try:
            return raw, json.loads(raw) if raw else None
        except ValueError:
            return raw, raw.decode("utf-8", "replace")

    def _record(self, kind: str, body: Any, step: int | None = None, status: int = 200) -> RecordedRequest:
        parts = urlsplit(self.path)
        rec = RecordedRequest(
            method=self.command, path=parts.path, query=parts.query,
            headers={k.lower(): v for k, v in self.headers.items()}, body=body,
            kind=kind, at=time.monotonic(), step=step, status=status,
        )
        with self.server.lock:
            self.server.requests.append(rec)
        return rec

    def _send_json(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        payload = {"type": name, **payload}
        self._chunk(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())

    # -- verbs ------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self._record("other", None)
        self._send_json(200, {})

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        self._record("other", None)
        if path == "/v1/models" or path.startswith("/v1/models/"):
            model = {"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet",
                     "created_at": "2025-01-01T00:00:00Z"}
            if path == "/v1/models":
                self._send_json(200, {"data": [model], "has_more": False,
                                      "first_id": model["id"], "last_id": model["id"]})
            else:
                self._send_json(200, {**model, "id": path.rsplit("/", 1)[-1]})
            return
        self._send_json(200, {})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        _, body = self._read_body()
        if path == "/v1/messages/count_tokens":
            self._record("count_tokens", body)
            self._send_json(200, {"input_tokens": _estimate_tokens(body)})
            return
        if path != "/v1/messages":
            self._record("other", body)
            self._send_json(200, {})
            return
        if not isinstance(body, dict):
            self._record("other", body, status=400)
            self._send_json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                              "message": "body must be a JSON object"}})
            return
        if is_main_request(body, dict(self.headers.items())):
            step = assistant_turns(body)
            rec = self._record("main", body, step=step)
            model = self.server.model
            # a script of scripts: one conversation per launch, each picks its own (see PerLaunch)
            model = model.for_request(body) if hasattr(model, "for_request") else model
            turn, delay = model.turn(step), model.delay(step)
        else:
            rec = self._record("subagent" if self.headers.get(SUBAGENT_HEADER) else "aux", body)
            turn, delay = Turn([text(AUX_TEXT)]), 0.0
        if delay and self.server.stopping.wait(delay):
            return
        if turn.error is not None:
            rec.status = turn.error.status
            self._send_json(turn.error.status, {"type": "error", "error": {"type": turn.error.type,
                                                                            "message": turn.error.message}})
            return
        self._answer(body, turn)

    # -- the answer -------------------------------------------------------------------
    def _blocks(self, turn: Turn) -> list[dict[str, Any]]:
        out = []
        for b in turn.blocks:
            if b["type"] == "tool_use":
                out.append({"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24],
                            "name": b["name"], "input": b["input"]})
            else:
                out.append({"type": "text", "text": b["text"]})
        return out

    def _answer(self, body: dict[str, Any], turn: Turn) -> None:
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        model = body.get("model") or "claude-sonnet-4-5"
        blocks = self._blocks(turn)
        input_tokens = turn.input_tokens or _estimate_tokens(body.get("messages"))
        output_tokens = max(1, len(json.dumps(blocks)) // 4)
        usage = {"input_tokens": input_tokens, "output_tokens": output_tokens,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if not body.get("stream"):
            self._send_json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                                  "content": blocks, "stop_reason": turn.stop_reason,
                                  "stop_sequence": None, "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        self.end_headers()
        try:
            self._event("message_start", {"message": {
                "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {**usage, "output_tokens": 1}}})
            for index, block in enumerate(blocks):
                if block["type"] == "text":
                    self._event("content_block_start", {"index": index,
                                                        "content_block": {"type": "text", "text": ""}})
                    s = block["text"]
                    for i in range(0, max(len(s), 1), DELTA_CHUNK):
                        self._event("content_block_delta", {"index": index, "delta": {
                            "type": "text_delta", "text": s[i:i + DELTA_CHUNK]}})
                else:
                    self._event("content_block_start", {"index": index, "content_block": {
                        "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
                    s = json.dumps(block["input"])
                    for i in range(0, len(s), DELTA_CHUNK):
                        self._event("content_block_delta", {"index": index, "delta": {
                            "type": "input_json_delta", "partial_json": s[i:i + DELTA_CHUNK]}})
                self._event("content_block_stop", {"index": index})
            self._event("message_delta", {"delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
                                          "usage": {"output_tokens": output_tokens}})
            self._event("message_stop", {})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


@dataclass
class ClaudeAPI:
    url: str
    requests: list[RecordedRequest]
    _server: _Server = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def main_requests(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.kind == "main"]

    def paths(self) -> list[str]:
        """Each distinct "METHOD path" the CLI called, in order of first call."""
        seen: dict[str, None] = {}
        for r in list(self.requests):
            seen.setdefault(f"{r.method} {r.path}", None)
        return list(seen)


def start_claude_api(model: ScriptedModel) -> ClaudeAPI:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.model = model
    server.requests = []
    server.lock = threading.Lock()
    server.stopping = threading.Event()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="claude-api", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    return ClaudeAPI(url=f"http://{host}:{port}", requests=server.requests, _server=server, _thread=thread)
