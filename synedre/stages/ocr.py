"""Stage `ocr`: text from clean images, kept only in the message's private directory (SPEC §5)."""
from __future__ import annotations

from synedre import attachments as files, runner
from synedre.config import Settings, get_settings
from synedre.db import messages
from synedre.db.types import Conn
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


class Ocr(runner.StageCode[ParsedMessage, tuple[int, list[str], list[str]]]):
    stage = STAGE

    def __init__(self, s: Settings) -> None:
        self.s = s

    def load(self, conn: Conn, claim: runner.Claim) -> ParsedMessage:
        return ParsedMessage.from_claim(claim.state, messages.attachments_of(conn, claim.state))

    def instant(self, msg: ParsedMessage) -> bool:
        return not files.images(msg.attachments)  # nothing for Tesseract

    def work(self, claim: runner.Claim, msg: ParsedMessage) -> tuple[int, list[str], list[str]]:
        """(images, texts, errors)."""
        images = len(files.images(msg.attachments))
        return (images, *texts(msg, self.s)) if images else (0, [], [])

    def write(self, conn: Conn, claim: runner.Claim, worked: tuple[int, list[str], list[str]]) -> runner.Done:
        images, found, errors = worked
        # counts only: the text itself never reaches the database or a log
        return runner.Done(Status.READ, "ocr_extracted" if images else "ocr_no_images",
                           {"images": images, "characters": sum(map(len, found)), "errors": errors})

    def after(self, claim: runner.Claim, worked: object, result: runner.Done | runner.Held) -> None:
        assert isinstance(result, runner.Done)
        log.info("ocr_extracted", message=claim.message_id, images=result.detail["images"],
                 characters=result.detail["characters"])


def run(message_id: int, s: Settings | None = None) -> runner.Result:
    return runner.run(Ocr(s or get_settings()), message_id)
