"""The clamd client against a real clamd (Unix socket and TCP), plus its reply parser."""

from __future__ import annotations

import functools
import io
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from synedre.scan.clamd import Verdict, parse_reply, ping, scan_bytes
from tests.services.clamd import (
    EICAR,
    EICAR_SIGNATURE,
    MAX_RECURSION,
    STREAM_MAX_LENGTH,
    Clamd,
    start_clamd,
)


@pytest.fixture(scope="module")
def clamd() -> Iterator[Clamd]:
    server = start_clamd()
    yield server
    server.stop()


@pytest.fixture(params=["unix", "tcp"])
def address(request, clamd: Clamd) -> str:
    return str(clamd.socket_path) if request.param == "unix" else clamd.tcp_address


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


# --- against the real daemon -------------------------------------------------


@pytest.mark.timeout(30)
def test_ping_answers_on_both_listeners(address: str) -> None:
    assert ping(address)


@pytest.mark.timeout(30)
def test_clean_bytes_are_clean(address: str) -> None:
    assert scan_bytes(b"Bonjour, voici la facture de mars.\n" * 1000, address) == Verdict("clean")


@pytest.mark.timeout(30)
def test_empty_attachment_is_clean(address: str) -> None:
    assert scan_bytes(b"", address) == Verdict("clean")


@pytest.mark.timeout(30)
def test_eicar_is_infected_with_its_signature(address: str) -> None:
    verdict = scan_bytes(EICAR, address)
    assert verdict.status == "infected"
    # clamd suffixes signatures from a non-official database with ".UNOFFICIAL".
    assert verdict.signature is not None and verdict.signature.startswith(EICAR_SIGNATURE)


@pytest.mark.timeout(30)
def test_eicar_split_across_many_chunks_is_found(address: str) -> None:
    verdict = scan_bytes(b"padding " * 1000 + EICAR, address, chunk=7)
    assert verdict.status == "infected"


@pytest.mark.timeout(30)
def test_eicar_inside_a_zip_is_infected(address: str) -> None:
    archive = _zip({"docs/readme.txt": b"nothing to see", "docs/tool.com": EICAR})
    verdict = scan_bytes(archive, address)
    assert verdict.status == "infected"
    assert verdict.signature is not None and verdict.signature.startswith(EICAR_SIGNATURE)


@pytest.mark.timeout(30)
def test_clean_zip_is_clean(address: str) -> None:
    assert scan_bytes(_zip({"a.txt": b"hello"}), address) == Verdict("clean")


@functools.cache
def _zip_bomb() -> bytes:
    # ~100 KB on the wire, one member just over clamd's scan limits once inflated.
    return _zip({"big.bin": bytes(STREAM_MAX_LENGTH + 1)})


def _nested_zip(depth: int, payload: bytes) -> bytes:
    data = payload
    for level in range(depth):
        data = _zip({f"level{level}.zip" if level else "a.txt": data})
    return data


@pytest.mark.timeout(30)
def test_archive_member_over_the_scan_limit_is_an_error_not_clean(address: str) -> None:
    verdict = scan_bytes(_zip_bomb(), address)
    assert verdict.status == "error"
    assert verdict.signature is not None and verdict.signature.startswith("Heuristics.Limits.Exceeded")


@pytest.mark.timeout(30)
def test_archive_nested_deeper_than_max_recursion_is_an_error(address: str) -> None:
    # Distinct payloads: clamd caches clean objects by hash, and a cached inner
    # archive is not descended into again, so its depth would not count.
    assert scan_bytes(_nested_zip(5, b"shallow"), address) == Verdict("clean")
    verdict = scan_bytes(_nested_zip(MAX_RECURSION + 2, b"deep"), address)
    assert verdict.status == "error" and verdict.signature == "Heuristics.Limits.Exceeded.MaxRecursion"


@pytest.mark.timeout(60)
def test_stream_longer_than_stream_max_length_is_an_error(address: str) -> None:
    verdict = scan_bytes(bytes(STREAM_MAX_LENGTH + 1), address, timeout=30)
    assert verdict.status == "error"
    assert verdict.detail


# --- when the scanner is not there or misbehaves -----------------------------


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(10)
def test_nothing_listening_on_tcp_is_an_error_quickly() -> None:
    start = time.monotonic()
    verdict = scan_bytes(EICAR, f"127.0.0.1:{_unused_port()}", timeout=5)
    assert verdict.status == "error" and "refused" in verdict.detail.lower()
    assert time.monotonic() - start < 1
    assert not ping(f"127.0.0.1:{_unused_port()}")


@pytest.mark.timeout(10)
def test_missing_or_stale_unix_socket_is_an_error_quickly(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))  # a socket file with no listener, as left by a crashed clamd
    start = time.monotonic()
    for path in (tmp_path / "missing.sock", stale):
        assert scan_bytes(EICAR, str(path), timeout=5).status == "error"
        assert not ping(str(path))
    assert time.monotonic() - start < 1


class _SilentServer:
    """Accepts connections, never reads nor answers: a wedged scanner."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        # shutdown() wakes the thread blocked in accept(); close() alone may not.
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()


@pytest.fixture(params=["unix", "tcp"])
def silent_address(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "unix":
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr = str(tmp_path / "silent.sock")
        listener.bind(addr)
    else:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{listener.getsockname()[1]}"
    listener.listen(8)
    server = _SilentServer(listener)
    yield addr
    server.close()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("size", [len(EICAR), 64 << 20], ids=["waits-for-reply", "blocks-on-send"])
def test_server_that_never_answers_is_an_error_within_the_timeout(silent_address: str, size: int) -> None:
    start = time.monotonic()
    verdict = scan_bytes(bytes(size), silent_address, timeout=1.0)
    elapsed = time.monotonic() - start
    assert verdict.status == "error" and "timed out" in verdict.detail
    assert 0.9 <= elapsed < 2.5
    start = time.monotonic()
    assert not ping(silent_address, timeout=0.5)
    assert time.monotonic() - start < 1.5


def test_malformed_address_is_a_configuration_error() -> None:
    for bad in ("clamd", "localhost:", ":3310", "localhost:99999", "localhost:http"):
        with pytest.raises(ValueError):
            scan_bytes(b"", bad)


# --- the reply parser --------------------------------------------------------


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("stream: OK\0", Verdict("clean")),
        ("stream: Win.Test.EICAR_HDB-1 FOUND\0", Verdict("infected", signature="Win.Test.EICAR_HDB-1")),
        ("INSTREAM size limit exceeded. ERROR", Verdict("error", detail="INSTREAM size limit exceeded. ERROR")),
        ("stream: Can't allocate memory ERROR", Verdict("error", detail="stream: Can't allocate memory ERROR")),
    ],
)
def test_parse_reply_known_replies(reply: str, expected: Verdict) -> None:
    assert parse_reply(reply) == expected


def test_parse_reply_limit_heuristic_is_an_error_not_a_virus() -> None:
    verdict = parse_reply("stream: Heuristics.Limits.Exceeded.MaxFileSize FOUND")
    assert verdict.status == "error" and verdict.signature == "Heuristics.Limits.Exceeded.MaxFileSize"


@pytest.mark.parametrize("reply", ["", "PONG", "stream: ", "stream:  FOUND", "stream: OK extra", "OK", "stream: ok"])
def test_parse_reply_unexpected_replies_fail_closed(reply: str) -> None:
    assert parse_reply(reply).status == "error"


@given(st.text())
def test_parse_reply_never_raises_and_only_exact_ok_is_clean(reply: str) -> None:
    verdict = parse_reply(reply)
    assert verdict.status in ("clean", "infected", "error")
    if verdict.status == "clean":
        assert reply.strip("\0\r\n ") == "stream: OK"
