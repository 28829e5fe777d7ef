"""A minimal clamd client: INSTREAM over a Unix socket or TCP, failing closed.

Every scanner problem (unreachable daemon, timeout, size limit, unexpected reply)
becomes an ``error`` verdict instead of an exception, because the caller blocks
anything that is not ``clean``.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Literal

# clamd reports files it could not scan completely (size, recursion, file count)
# with this heuristic prefix when AlertExceedsMax is on: not a virus, not clean.
LIMITS_EXCEEDED_PREFIX = "Heuristics.Limits.Exceeded"
MAX_REPLY_BYTES = 4096


@dataclass(frozen=True)
class Verdict:
    status: Literal["clean", "infected", "error"]
    signature: str | None = None
    detail: str | None = None


def parse_reply(reply: str) -> Verdict:
    """Map one clamd reply line to a verdict; only an exact ``stream: OK`` is clean."""
    text = reply.strip("\0\r\n ")
    if text == "stream: OK":
        return Verdict("clean")
    if text.endswith(" ERROR"):
        return Verdict("error", detail=text)
    if text.startswith("stream: ") and text.endswith(" FOUND"):
        signature = text[len("stream: ") : -len(" FOUND")].strip()
        if signature.startswith(LIMITS_EXCEEDED_PREFIX):
            return Verdict("error", signature=signature, detail=f"scan limit exceeded: {signature}")
        if signature:
            return Verdict("infected", signature=signature)
    return Verdict("error", detail=f"unexpected clamd reply: {text[:200]!r}")


def _parse_address(address: str) -> str | tuple[str, int]:
    """A Unix socket path stays a string; ``host:port`` becomes a tuple."""
    if "/" in address:
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"clamd address must be a socket path or host:port, got {address!r}")
    return host.strip("[]"), int(port)


def _connect(target: str | tuple[str, int], timeout: float) -> socket.socket:
    if isinstance(target, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(target)
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection(target, timeout=timeout)
    # Length prefixes and the terminator are tiny writes; Nagle would hold them
    # back until the previous chunk is acknowledged.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def arm(self, sock: socket.socket) -> None:
        """Give the next blocking call only what is left of the total budget."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)


def _read_reply(sock: socket.socket, deadline: _Deadline) -> str:
    # z-prefixed commands make clamd terminate its reply with a NUL byte.
    buf = b""
    while b"\0" not in buf and len(buf) < MAX_REPLY_BYTES:
        deadline.arm(sock)
        part = sock.recv(MAX_REPLY_BYTES)
        if not part:
            break
        buf += part
    if not buf:
        raise ConnectionError("clamd closed the connection without a reply")
    return buf.split(b"\0", 1)[0].decode("utf-8", "replace")


def scan_bytes(data: bytes, address: str, timeout: float = 30.0, chunk: int = 1 << 20) -> Verdict:
    """Scan ``data`` with clamd at ``address``; ``timeout`` bounds connect, send and reply.

    A malformed ``address`` or ``chunk`` is a configuration bug and raises ValueError;
    everything that can go wrong with the scanner itself is an ``error`` verdict.
    """
    if not 0 < chunk < 1 << 32:
        raise ValueError(f"chunk must be between 1 and 2**32 - 1 bytes, got {chunk}")
    target = _parse_address(address)
    deadline = _Deadline(timeout)
    view = memoryview(data)
    try:
        with _connect(target, timeout) as sock:
            try:
                deadline.arm(sock)
                sock.sendall(b"zINSTREAM\0")
                for start in range(0, len(view), chunk):
                    piece = view[start : start + chunk]
                    deadline.arm(sock)
                    sock.sendall(struct.pack(">I", len(piece)))
                    sock.sendall(piece)
                deadline.arm(sock)
                sock.sendall(struct.pack(">I", 0))
            except (BrokenPipeError, ConnectionResetError) as exc:
                # clamd hangs up mid-stream when StreamMaxLength is exceeded, after
                # writing why; recover that reply if it is still readable.
                try:
                    return parse_reply(_read_reply(sock, deadline))
                except OSError:
                    return Verdict("error", detail=f"clamd closed the stream: {exc}")
            return parse_reply(_read_reply(sock, deadline))
    except TimeoutError:
        return Verdict("error", detail=f"clamd scan timed out after {deadline.seconds:g}s")
    except OSError as exc:
        return Verdict("error", detail=f"clamd at {address}: {exc}")


def ping(address: str, timeout: float = 5.0) -> bool:
    """True if clamd at ``address`` answers PONG within ``timeout`` seconds."""
    target = _parse_address(address)
    deadline = _Deadline(timeout)
    try:
        with _connect(target, timeout) as sock:
            deadline.arm(sock)
            sock.sendall(b"zPING\0")
            return _read_reply(sock, deadline).strip() == "PONG"
    except OSError:
        return False
