"""A scripted local LLM API speaking the Mistral, OpenAI and Anthropic wire formats.

    server = start_llm_server(lambda request, path: "hello")
    SYNEDRE_MISTRAL_SERVER_URL = server.url          # the Mistral SDK adds /v1/...
    SYNEDRE_OPENAI_BASE_URL    = server.url + "/v1"  # the OpenAI SDK adds /chat/completions
    SYNEDRE_ANTHROPIC_BASE_URL = server.url          # the Anthropic SDK adds /v1/messages

Endpoints: GET /v1/models (a provider's probe; the script may refuse it with an
HTTPError), POST /v1/chat/completions and /v1/embeddings (Mistral and OpenAI share
them), POST /v1/messages (JSON, or SSE when the body says "stream": true) and
/v1/messages/count_tokens. `script(request_body, path)` decides each answer:

- a str: the assistant's text, wrapped in the path's format with token counts;
- None: a default answer ("ok", or deterministic hashed embeddings — also what a str
  answer to /v1/embeddings gives, so one script can serve chat and embeddings);
- a list of vectors: the embeddings;
- a dict: the raw response body, sent as is (for /v1/messages with "stream": true a
  full Messages-API message, e.g. with tool_use blocks, is turned into SSE events);
- an HTTPError (returned or raised): that status, with a provider-shaped error body;
- any other exception raised: HTTP 500.

The script runs on the request's own thread, so it may sleep to script latency for
one prompt; `delay_s` delays every answer. Every request is recorded (path, headers
with the credential values redacted, JSON body). Handles hundreds of concurrent
connections (one thread each, a deep listen backlog, HTTP/1.1 keep-alive).
"""
from __future__ import annotations

import base64
import json
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from synedre.ai.providers.local import hashed_vector

CREDENTIAL_HEADERS = {"authorization", "x-api-key", "api-key"}
# One entry of GET /v1/models, as Mistral lists a model (the OpenAI SDK reads it as well).
MODEL_CARD = {"id": "scripted", "object": "model", "type": "base", "created": 0, "owned_by": "scripted",
              "capabilities": {"completion_chat": True}}
DEFAULT_EMBEDDING_DIM = 1024  # mistral-embed's dimension


class HTTPError(Exception):
    def __init__(self, status: int, message: str = "scripted error", headers: dict[str, str] | None = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    query: str
    headers: dict[str, str]
    body: Any


Script = Callable[[Any, str], Any]


@dataclass
class LLMServer:
    url: str
    requests: list[RecordedRequest]
    _server: ThreadingHTTPServer
    _thread: threading.Thread
    _stopping: threading.Event = field(default_factory=threading.Event)

    def bodies(self, path: str | None = None) -> list[Any]:
        return [r.body for r in list(self.requests) if path is None or r.path == path]

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in delay_s
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _words(value: Any) -> int:
    """A rough token count: words in every string of the value."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, dict):
        return sum(_words(v) for k, v in value.items() if k not in ("type", "role", "model"))
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    return 0


def _prompt_tokens(body: dict) -> int:
    return max(1, _words(body.get("messages", [])) + _words(body.get("system", "")))


def _chat_completion(body: dict, text: str) -> dict:
    tokens_in, tokens_out = _prompt_tokens(body), max(1, _words(text))
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
        "created": int(time.time()), "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text, "tool_calls": None}}],
        "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                  "total_tokens": tokens_in + tokens_out},
    }


def _embeddings(body: dict, vectors: list[list[float]] | None) -> dict:
    inputs = body.get("input", body.get("inputs", []))
    inputs = [inputs] if isinstance(inputs, str) else list(inputs)
    if vectors is None:
        dim = body.get("dimensions") or body.get("output_dimension") or DEFAULT_EMBEDDING_DIM
        vectors = [hashed_vector(str(t), dim) for t in inputs]
    base64_wanted = body.get("encoding_format") == "base64"  # the OpenAI SDK's default
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode()
             if base64_wanted else v}
            for i, v in enumerate(vectors)]
    tokens = max(1, _words(inputs))
    return {"id": f"embd-{uuid.uuid4().hex[:12]}", "object": "list", "data": data,
            "model": body.get("model", "scripted"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _message(body: dict, answer: str | dict) -> dict:
    message = {"content": [{"type": "text", "text": answer}]} if isinstance(answer, str) else dict(answer)
    message.setdefault("id", f"msg_{uuid.uuid4().hex[:20]}")
    message.setdefault("type", "message")
    message.setdefault("role", "assistant")
    message.setdefault("model", body.get("model", "scripted"))
    message.setdefault("stop_reason",
                       "tool_use" if any(b.get("type") == "tool_use" for b in message["content"])
                       else "end_turn")
    message.setdefault("stop_sequence", None)
    message.setdefault("usage", {"input_tokens": _prompt_tokens(body),
                                 "output_tokens": max(1, _words(message["content"]))})
    return message


def _sse(message: dict) -> bytes:
    """The Messages API event sequence for one complete message."""
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {**message["usage"], "output_tokens": 1}}})]
    for i, block in enumerate(message["content"]):
        kind = block.get("type")
        if kind == "text":
            start, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
        elif kind == "tool_use":
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))}]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                      {"type": "signature_delta", "signature": block.get("signature", "sig")}]
        else:
            start, deltas = block, []
        events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": start}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
                   for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
        "usage": {"output_tokens": message["usage"]["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _error_body(path: str, status: int, message: str) -> dict:
    if path.startswith("/v1/messages"):
        kind = {429: "rate_limit_error", 401: "authentication_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"object": "error", "message": message, "type": "scripted_error", "code": str(status),
            "error": {"message": message, "type": "scripted_error", "code": str(status)}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the SDKs pool connections
    timeout = 60  # an idle keep-alive connection does not hold its thread forever
    # Headers and body leave in separate writes: without this, Nagle + delayed ACK add
    # 40 ms to every answer, which a throughput benchmark would measure instead of us.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the recorded requests are the log

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/v1/models":  # a provider's probe (`synedre status`): a script may refuse it
            try:
                answer = self.server.script({}, path)
            except HTTPError as exc:
                answer = exc
            except Exception:  # a script written for POST bodies: the listing as always
                answer = None
            if isinstance(answer, HTTPError):
                self._send(answer.status, _error_body(path, answer.status, answer.message), answer.headers)
            else:
                self._send(200, {"object": "list", "data": [MODEL_CARD]})
        else:
            self._send(404, _error_body(path, 404, f"no route {path}"))

    def do_POST(self) -> None:
        parts = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): ("[redacted]" if k.lower() in CREDENTIAL_HEADERS else v)
                   for k, v in self.headers.items()}
        with self.server.lock:
            self.server.requests.append(RecordedRequest(parts.path, parts.query, headers, body))
        if self.server.delay_s and self.server.stopping.wait(self.server.delay_s):
            self.close_connection = True
            return
        try:
            self._answer(parts.path, body if isinstance(body, dict) else {})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): nothing to answer

    def _answer(self, path: str, body: dict) -> None:
        if path == "/v1/messages/count_tokens":
            return self._send(200, {"input_tokens": _prompt_tokens(body)})
        if path not in ("/v1/chat/completions", "/v1/embeddings", "/v1/messages"):
            return self._send(404, _error_body(path, 404, f"no route {path}"))
        try:
            answer = self.server.script(body, path)
        except HTTPError as exc:
            answer = exc
        except Exception as exc:  # a scripted failure, or a bug in the test's script
            answer = HTTPError(500, f"script raised {type(exc).__name__}: {exc}")
        if isinstance(answer, HTTPError):
            return self._send(answer.status, _error_body(path, answer.status, answer.message),
                              answer.headers)
        if path == "/v1/embeddings":
            return self._send(200, answer if isinstance(answer, dict)
                              else _embeddings(body, answer if isinstance(answer, list) else None))
        answer = "ok" if answer is None else answer
        if path == "/v1/chat/completions":
            return self._send(200, answer if isinstance(answer, dict) else _chat_completion(body, answer))
        message = _message(body, answer)
        if body.get("stream"):
            return self._send(200, _sse(message), content_type="text/event-stream")
        self._send(200, message)

    def _send(self, status: int, payload: dict | bytes, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:16]}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # benchmarks open hundreds of connections at once

    def __init__(self, script: Script, delay_s: float):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script, self.delay_s = script, delay_s
        self.requests: list[RecordedRequest] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that disconnects (its own timeout) is expected; anything else is a bug here.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def start_llm_server(script: Script = lambda request, path: None, delay_s: float = 0.0) -> LLMServer:
    server = _Server(script, delay_s)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="llm-server", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    return LLMServer(f"http://{host}:{port}", server.requests, server, thread, server.stopping)
