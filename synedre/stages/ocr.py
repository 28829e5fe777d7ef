"""Stage `ocr`: text from clean images, kept only in the message's private directory (SPEC §5)."""
from __future__ import annotations

from synedre import attachments as files, runner
from synedre.config import Settings, get_settings
from synedre.log import log
from synedre.message import ParsedMessage
from synedre.ocr.tesseract import OcrError, ocr_image
from synedre.pipeline import BY_NAME, Status

STAGE = BY_NAME["ocr"]


def texts(msg: ParsedMessage, s: Settings) -> tuple[list[str], list[str]]:
    """(texts, errors) for the clean images: cached in the private directory, else computed."""
    out, errors = [], []
    data = None
    rows = list(msg.attachments)
    for row in files.images(rows):
        cached = files.read_private(msg.attachments_dir, files.ocr_name(row))
        if cached is None:
            data = data or files.payloads(msg.files_state(), rows)
            try:
                cached = ocr_image(data[row["idx"]] or b"", s.ocr_languages, timeout=s.ocr_timeout_s)
            except OcrError as exc:
                errors.append(f"{row['idx']}: {exc}"[:200])
                continue
            files.write_private(msg.attachments_dir, files.ocr_name(row), cached)
        if cached:
            out.append(cached)
    return out, errors


def run(message_id: int, s: Settings | None = None) -> runner.Result:
    s = s or get_settings()
    return runner.run(STAGE, message_id, lambda conn, claim: ParsedMessage.read(conn, claim.state),
                      lambda claim, msg: _work(msg, s))


def _work(msg: ParsedMessage, s: Settings) -> runner.Done:
    images = files.images(msg.attachments)
    found, errors = texts(msg, s) if images else ([], [])
    # counts only: the text itself never reaches the database or a log
    return runner.Done(Status.READ, "ocr_extracted" if images else "ocr_no_images",
                       {"images": len(images), "characters": sum(map(len, found)), "errors": errors},
                       then=lambda: log.info("ocr_extracted", message=msg.id, images=len(images),
                                             characters=sum(map(len, found))))
