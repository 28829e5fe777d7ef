"""Proofs every host reads (issue 16, item 7): QA screenshots, mock-up diff images and
mock-ups live in PostgreSQL, keyed by the sha256 of their bytes and written once
(`synedre.proofs`); a host's files are only a cache of those rows.

`store` writes a proof (the same bytes twice: one row, the same key). `local` gives this
host a file to open for a key: its cached copy while the bytes there still hash to the
key, else the row fetched into `<state_dir>/proofs/<key>/<name>` (directories 0700, the
file 0600, renamed into place so a concurrent reader never opens half a file). So a QA
worker compares a mock-up registered on another host, and the recap attaches screenshots
taken on another host.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from synedre.config import get_settings
from synedre.db.types import Conn

KINDS = ("screenshot", "diff", "mockup")
CACHE_DIR = "proofs"
# A proof is an image a founder opens in a mail; past this it is not a proof but a payload.
MAX_BYTES = 32 * 1024 * 1024
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))


class ProofError(Exception):
    """A proof that cannot be stored (too large, unknown kind) or is not in the database."""


def key_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mime_of(data: bytes) -> str:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in _MAGIC if data.startswith(magic)), "application/octet-stream")


def store(conn: Conn, data: bytes, kind: str) -> str:
    """Write `data` once (a row that exists is kept as it is); its key."""
    if kind not in KINDS:
        raise ProofError(f"unknown proof kind {kind!r} (one of {', '.join(KINDS)})")
    if len(data) > MAX_BYTES:
        raise ProofError(f"a {kind} of {len(data)} bytes is over {MAX_BYTES}")
    key = key_of(data)
    conn.execute("INSERT INTO synedre.proofs (sha256, kind, mime, size, content) VALUES (%s, %s, %s, %s, %s)"
                 " ON CONFLICT (sha256) DO NOTHING", (key, kind, mime_of(data), len(data), data))
    return key


def cache_path(key: str, name: str, state_dir: Path | None = None) -> Path:
    """Where this host keeps its copy of proof `key`, under a file name a mail reader shows."""
    if not re.fullmatch(r"[0-9a-f]{64}", key):
        raise ProofError(f"not a proof key: {key[:80]!r}")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(name).name).lstrip(".-") or "proof"
    return (state_dir or get_settings().state_dir).resolve() / CACHE_DIR / key / safe


def _holds(path: Path, key: str) -> bool:
    try:
        return key_of(path.read_bytes()) == key
    except FileNotFoundError:
        return False


def _write_private(path: Path, data: bytes) -> None:
    for d in reversed([path.parent, *path.parent.parents]):
        if not d.exists():
            d.mkdir(mode=0o700, exist_ok=True)
            os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def local(conn: Conn, key: str, name: str, state_dir: Path | None = None) -> Path:
    """A file on this host holding proof `key`: the cache's, fetched from the database when
    it is missing or its bytes are not the key's."""
    path = cache_path(key, name, state_dir)
    if _holds(path, key):
        return path
    row = conn.execute("SELECT content FROM synedre.proofs WHERE sha256 = %s", (key,)).fetchone()
    if row is None:
        raise ProofError(f"proof {key} is not in the database")
    _write_private(path, bytes(row["content"]))
    return path


def readable(conn: Conn, key: str | None, path: str | None, name: str) -> str | None:
    """What a reader on this host opens for a proof reference: the local copy of `key`, named
    like the file it was stored from; a row written before proofs (no key) keeps its path."""
    if key is None:
        return path
    return str(local(conn, key, Path(path).name if path else name))
