"""A message's attachment bytes, wherever the stage runs, and their private directory."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from synedre.ingest import mime

OCR_SUFFIX = ".ocr.txt"


def payloads(state: dict[str, Any], rows: list[dict[str, Any]]) -> dict[int, bytes | None]:
    """idx -> bytes, from the ingest directory, else re-extracted from the raw message
    (another host, a reboot). None when the bytes no longer match what was stored."""
    directory = Path(state["attachments_dir"]) if state.get("attachments_dir") else None
    out: dict[int, bytes | None] = {}
    parsed = None
    for row in rows:
        path = directory / row["stored_name"] if directory else None
        if path is not None and path.is_file():
            data = path.read_bytes()
        else:
            parsed = parsed or mime.parse(bytes(state["raw"]))
            data = next((a.payload for a in parsed.attachments if a.idx == row["idx"]), b"")
        out[row["idx"]] = data if hashlib.sha256(data).hexdigest() == row["sha256"] else None
    return out


def write_private(directory: str | None, name: str, text: str) -> None:
    if not directory or not Path(directory).is_dir():
        return  # nowhere private to keep it: the reader recomputes instead
    fd = os.open(Path(directory) / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def read_private(directory: str | None, name: str) -> str | None:
    path = Path(directory) / name if directory else None
    return path.read_text(encoding="utf-8") if path and path.is_file() else None


def remove(directory: str | None) -> None:
    """Classification ended: the attachment copies and OCR text go."""
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


def images(rows: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """The attachments OCR reads: clean images."""
    return [r for r in rows if r["content_type"].startswith("image/") and r["verdict"] == "clean"]


def ocr_name(row: dict[str, Any]) -> str:
    """The private file holding an image's OCR text."""
    return f"{row['idx']:04d}{OCR_SUFFIX}"


def cached_texts(rows: list[dict[str, Any]] | tuple[dict[str, Any], ...], directory: str | None) -> list[str]:
    """What OCR left for the classifier (never recomputed there: OCR is its own stage's work)."""
    return [t for row in images(rows) if (t := read_private(directory, ocr_name(row)))]
