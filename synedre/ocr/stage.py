"""Stage `ocr`: text from clean images, kept only in the message's private directory (SPEC §5)."""
from __future__ import annotations

from synedre import attachments as files, db
from synedre.config import Settings, get_settings
from synedre.db import pipeline
from synedre.log import log
from synedre.ocr.tesseract import OcrError, ocr_image


def images(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["content_type"].startswith("image/") and r["verdict"] == "clean"]


def texts(state: dict, rows: list[dict], s: Settings) -> tuple[list[str], list[str]]:
    """(texts, errors) for the clean images: cached in the private directory, else computed."""
    out, errors = [], []
    data = None
    for row in images(rows):
        name = f"{row['idx']:04d}{files.OCR_SUFFIX}"
        cached = files.read_private(state["attachments_dir"], name)
        if cached is None:
            data = data or files.payloads(state, rows)
            try:
                cached = ocr_image(data[row["idx"]] or b"", s.ocr_languages, timeout=s.ocr_timeout_s)
            except OcrError as exc:
                errors.append(f"{row['idx']}: {exc}"[:200])
                continue
            files.write_private(state["attachments_dir"], name, cached)
        if cached:
            out.append(cached)
    return out, errors


def run(message_id: int, s: Settings | None = None) -> str | None:
    s = s or get_settings()
    with db.transaction() as conn:
        state = pipeline.lock(conn, message_id, "scanned")
        if state is None:
            return None
        rows = pipeline.attachments(conn, message_id)
        if images(rows) and not pipeline.has_audit(conn, message_id, "ocr_extracted"):
            found, errors = texts(state, rows, s)
            # counts only: the text itself never reaches the database or a log
            pipeline.audit(conn, message_id, "ocr_extracted",
                           images=len(images(rows)), characters=sum(map(len, found)), errors=errors)
            log.info("ocr_extracted", message=message_id, images=len(images(rows)),
                     characters=sum(map(len, found)))
    return "classify"
