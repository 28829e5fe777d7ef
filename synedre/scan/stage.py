"""Stage `scan`: every attachment gets a clamd verdict before anything reads it (SPEC §4)."""
from __future__ import annotations

from synedre import attachments as files, db
from synedre.config import Settings, get_settings
from synedre.db import pipeline
from synedre.log import log
from synedre.scan.clamd import Verdict, scan_bytes


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


def run(message_id: int, s: Settings | None = None) -> str | None:
    """Returns the next stage, or None when there is nothing more to do."""
    s = s or get_settings()
    with db.transaction() as conn:
        state = pipeline.lock(conn, message_id, "received")
        if state is None:
            return None
        rows = pipeline.attachments(conn, message_id)
        found = verdicts(rows, files.payloads(state, rows), s) if rows else {}
        for idx, v in found.items():
            conn.execute("UPDATE synedre.attachments SET verdict = %s, signature = %s, scanned_at = now()"
                         " WHERE message_id = %s AND idx = %s", (v.status, v.signature, message_id, idx))
        unsafe = {i: v for i, v in found.items() if v.status != "clean"}
        if unsafe:
            pipeline.transition(conn, message_id, "blocked_unsafe_attachment",
                                "classify_blocked_unsafe_attachments",
                                {"attachments": [{"idx": i, "verdict": v.status, "signature": v.signature,
                                                  "detail": v.detail} for i, v in unsafe.items()]})
        else:
            pipeline.transition(conn, message_id, "scanned", "scanned", {"attachments": len(found)})
    log.info("scanned", message=message_id, attachments=len(found), unsafe=len(unsafe))
    if unsafe:
        files.remove(state["attachments_dir"])  # nothing downstream will read them
        return None
    return "ocr"
