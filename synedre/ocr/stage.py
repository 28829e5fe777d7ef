"""Stage `ocr`: text from clean images, kept only in the message's private directory (SPEC §5)."""
from __future__ import annotations

from synedre import attachments as files, db
from synedre.config import Settings, get_settings
from synedre.db import pipeline as sql
from synedre.log import log
from synedre.message import ParsedMessage
from synedre.ocr.tesseract import OcrError, ocr_image
from synedre.pipeline import BY_NAME, Status

STAGE = BY_NAME["ocr"]


def images(rows: list[dict] | tuple[dict, ...]) -> list[dict]:
    return [r for r in rows if r["content_type"].startswith("image/") and r["verdict"] == "clean"]


def _name(row: dict) -> str:
    return f"{row['idx']:04d}{files.OCR_SUFFIX}"


def texts(msg: ParsedMessage, s: Settings) -> tuple[list[str], list[str]]:
    """(texts, errors) for the clean images: cached in the private directory, else computed."""
    out, errors = [], []
    data = None
    rows = list(msg.attachments)
    for row in images(rows):
        cached = files.read_private(msg.attachments_dir, _name(row))
        if cached is None:
            data = data or files.payloads(msg.files_state(), rows)
            try:
                cached = ocr_image(data[row["idx"]] or b"", s.ocr_languages, timeout=s.ocr_timeout_s)
            except OcrError as exc:
                errors.append(f"{row['idx']}: {exc}"[:200])
                continue
            files.write_private(msg.attachments_dir, _name(row), cached)
        if cached:
            out.append(cached)
    return out, errors


def cached_texts(msg: ParsedMessage) -> list[str]:
    """What OCR left for the classifier (never recomputed there: OCR is this stage's work)."""
    return [t for row in images(msg.attachments) if (t := files.read_private(msg.attachments_dir, _name(row)))]


def run(message_id: int, s: Settings | None = None) -> Status | str:
    s = s or get_settings()
    with db.transaction() as conn:
        claim = sql.claim(conn, STAGE, message_id)
        if claim is None:
            return sql.why_not(conn, STAGE, message_id)
        msg = ParsedMessage.from_claim(claim.state, sql.attachments(conn, message_id))
    with sql.working(claim):
        found, errors = texts(msg, s) if images(msg.attachments) else ([], [])
        with db.transaction() as conn:
            # counts only: the text itself never reaches the database or a log
            sql.write(conn, claim, Status.READ, "ocr_extracted" if images(msg.attachments) else "ocr_no_images", {
                "images": len(images(msg.attachments)), "characters": sum(map(len, found)), "errors": errors})
    log.info("ocr_extracted", message=message_id, images=len(images(msg.attachments)),
             characters=sum(map(len, found)))
    return Status.READ
