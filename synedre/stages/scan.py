"""Stage `scan`: every attachment gets a clamd verdict before anything reads it (SPEC §4)."""
from __future__ import annotations

from synedre import attachments as files, runner
from synedre.config import Settings, get_settings
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


def run(message_id: int, s: Settings | None = None) -> runner.Result:
    s = s or get_settings()
    return runner.run(STAGE, message_id, lambda conn, claim: ParsedMessage.read(conn, claim.state),
                      lambda claim, msg: _work(msg, s))


def _work(msg: ParsedMessage, s: Settings) -> runner.Write:
    """clamd is called with no transaction open and no connection held."""
    rows = list(msg.attachments)
    found = verdicts(rows, files.payloads(msg.files_state(), rows), s) if rows else {}
    unsafe = {i: v for i, v in found.items() if v.status != "clean"}

    def write(conn: Conn) -> runner.Done:
        for idx, v in found.items():
            conn.execute("UPDATE synedre.attachments SET verdict = %s, signature = %s, scanned_at = now()"
                         " WHERE message_id = %s AND idx = %s", (v.status, v.signature, msg.id, idx))
        if not unsafe:
            return runner.Done(Status.SCANNED, detail={"attachments": len(found)},
                               then=lambda: log.info("scanned", message=msg.id, attachments=len(found),
                                                     clean=len(found)))
        return runner.Done(Status.BLOCKED_UNSAFE_ATTACHMENT, "classify_blocked_unsafe_attachments", {
            "reason": _reason(unsafe), "attachments": [{"idx": i, "verdict": v.status, "signature": v.signature,
                                                        "detail": v.detail} for i, v in unsafe.items()]},
            then=lambda: _blocked(msg, len(found), unsafe))
    return write


def _blocked(msg: ParsedMessage, scanned: int, unsafe: dict[int, Verdict]) -> None:
    # "infected" and "scanner down" must not read alike in the log
    log.warning("scan_blocked", message=msg.id, attachments=scanned,
                infected=sum(v.status == "infected" for v in unsafe.values()),
                errors=sum(v.status == "error" for v in unsafe.values()), reason=_reason(unsafe))
    files.remove(msg.attachments_dir)  # nothing downstream will read them


def _reason(unsafe: dict[int, Verdict]) -> str:
    """One line an operator reads: the signature, or the scanner's own error."""
    parts = [f"attachment {i}: infected ({v.signature})" if v.status == "infected"
             else f"attachment {i}: scanner error ({v.detail})" for i, v in unsafe.items()]
    return "; ".join(parts)[:500]
