"""Stage `scan`: every attachment gets a clamd verdict before anything reads it (SPEC §4)."""
from __future__ import annotations

from synedre import attachments as files, runner
from synedre.config import Settings, get_settings
from synedre.db import messages
from synedre.db.types import Conn
from synedre.log import log
from synedre.message import ParsedMessage
from synedre.pipeline import BY_NAME, Status
from synedre.scan.clamd import Verdict, scan_bytes

STAGE = BY_NAME["scan"]


def verdicts(rows: list[dict], data: dict[int, bytes | None], s: Settings) -> dict[int, Verdict]:
    out, total = {}, 0
    for row in rows:
        payload = data.get(row["idx"])
        total += row["size"]
        if payload is None:
            out[row["idx"]] = Verdict("error", detail="attachment bytes changed since ingestion")
        elif row["size"] > s.max_attachment_bytes:
            out[row["idx"]] = Verdict("error", detail=f"larger than {s.max_attachment_bytes} bytes")
        elif total > s.max_scan_bytes:
            out[row["idx"]] = Verdict("error", detail=f"message attachments exceed {s.max_scan_bytes} bytes")
        else:
            out[row["idx"]] = scan_bytes(payload, s.clamd, timeout=s.scan_timeout_s)
    return out


class Scan(runner.StageCode[ParsedMessage, dict[int, Verdict]]):
    stage = STAGE

    def __init__(self, s: Settings) -> None:
        self.s = s

    def load(self, conn: Conn, claim: runner.Claim) -> ParsedMessage:
        return ParsedMessage.from_claim(claim.state, messages.attachments_of(conn, claim.state))

    def instant(self, msg: ParsedMessage) -> bool:
        return not msg.attachments  # nothing to send to clamd

    def work(self, claim: runner.Claim, msg: ParsedMessage) -> dict[int, Verdict]:
        rows = list(msg.attachments)
        return verdicts(rows, files.payloads(msg.files_state(), rows), self.s) if rows else {}

    def write(self, conn: Conn, claim: runner.Claim, found: dict[int, Verdict]) -> runner.Done:
        for idx, v in found.items():
            conn.execute("UPDATE synedre.attachments SET verdict = %s, signature = %s, scanned_at = now()"
                         " WHERE message_id = %s AND idx = %s", (v.status, v.signature, claim.message_id, idx))
        if not (unsafe := _unsafe(found)):
            return runner.Done(Status.SCANNED, detail={"attachments": len(found)})
        return runner.Done(Status.BLOCKED_UNSAFE_ATTACHMENT, "classify_blocked_unsafe_attachments", {
            "reason": _reason(unsafe), "scanned": len(found),
            "attachments": [{"idx": i, "verdict": v.status, "signature": v.signature, "detail": v.detail}
                            for i, v in unsafe.items()]})

    def after(self, claim: runner.Claim, worked: object, result: runner.Done | runner.Held) -> None:
        assert isinstance(result, runner.Done)
        if result.status == Status.SCANNED:
            n = result.detail["attachments"]
            log.info("scanned", message=claim.message_id, attachments=n, clean=n)
            return
        # "infected" and "scanner down" must not read alike in the log
        unsafe = result.detail["attachments"]
        log.warning("scan_blocked", message=claim.message_id, attachments=result.detail["scanned"],
                    infected=sum(u["verdict"] == "infected" for u in unsafe),
                    errors=sum(u["verdict"] == "error" for u in unsafe), reason=result.detail["reason"])
        files.remove(claim.state["attachments_dir"])  # nothing downstream will read them


def run(message_id: int, s: Settings | None = None) -> runner.Result:
    return runner.run(Scan(s or get_settings()), message_id)


def _unsafe(found: dict[int, Verdict]) -> dict[int, Verdict]:
    return {i: v for i, v in found.items() if v.status != "clean"}


def _reason(unsafe: dict[int, Verdict]) -> str:
    """One line an operator reads: the signature, or the scanner's own error."""
    parts = [f"attachment {i}: infected ({v.signature})" if v.status == "infected"
             else f"attachment {i}: scanner error ({v.detail})" for i, v in unsafe.items()]
    return "; ".join(parts)[:500]
