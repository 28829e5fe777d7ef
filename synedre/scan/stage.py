"""Stage `scan`: every attachment gets a clamd verdict before anything reads it (SPEC §4)."""
from __future__ import annotations

from synedre import attachments as files, db
from synedre.config import Settings, get_settings
from synedre.db import pipeline as sql
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


def run(message_id: int, s: Settings | None = None) -> Status | str:
    """The status written, or (a str) why nothing was done."""
    s = s or get_settings()
    with db.transaction() as conn:
        claim = sql.claim(conn, STAGE, message_id)
        if claim is None:
            return sql.why_not(conn, STAGE, message_id)
        msg = ParsedMessage.from_claim(claim.state, sql.attachments(conn, message_id))
    # clamd is called with no transaction open and no connection held
    with sql.working(claim):
        rows = list(msg.attachments)
        found = verdicts(rows, files.payloads(msg.files_state(), rows), s) if rows else {}
        unsafe = {i: v for i, v in found.items() if v.status != "clean"}
        with db.transaction() as conn:
            for idx, v in found.items():
                conn.execute("UPDATE synedre.attachments SET verdict = %s, signature = %s, scanned_at = now()"
                             " WHERE message_id = %s AND idx = %s", (v.status, v.signature, message_id, idx))
            if unsafe:
                sql.write(conn, claim, Status.BLOCKED_UNSAFE_ATTACHMENT, "classify_blocked_unsafe_attachments",
                          {"reason": _reason(unsafe),
                           "attachments": [{"idx": i, "verdict": v.status, "signature": v.signature,
                                            "detail": v.detail} for i, v in unsafe.items()]})
            else:
                sql.write(conn, claim, Status.SCANNED, "scanned", {"attachments": len(found)})
    if unsafe:
        # "infected" and "scanner down" must not read alike in the log
        log.warning("scan_blocked", message=message_id, attachments=len(found),
                    infected=sum(v.status == "infected" for v in unsafe.values()),
                    errors=sum(v.status == "error" for v in unsafe.values()), reason=_reason(unsafe))
        files.remove(msg.attachments_dir)  # nothing downstream will read them
        return Status.BLOCKED_UNSAFE_ATTACHMENT
    log.info("scanned", message=message_id, attachments=len(found), clean=len(found))
    return Status.SCANNED


def _reason(unsafe: dict[int, Verdict]) -> str:
    """One line an operator reads: the signature, or the scanner's own error."""
    parts = [f"attachment {i}: infected ({v.signature})" if v.status == "infected"
             else f"attachment {i}: scanner error ({v.detail})" for i, v in unsafe.items()]
    return "; ".join(parts)[:500]
