"""Find messages stuck between stages (a lost enqueue, a dead worker) and hand them on again.

Every stage is idempotent and locks its row, so re-enqueueing a message that is in fact
still being worked on costs one no-op task.
"""
from __future__ import annotations

from synedre import db
from synedre.db import pipeline

# status -> (the stage that moves it on, minutes after which it counts as stuck)
STUCK = {
    "received": ("scan", 10),
    "scanned": ("ocr", 15),  # ocr hands on to classify, whose LLM retries last ~5 min
}
MATERIALIZE_AFTER_MIN = 10
BATCH = 200


def find_stuck() -> list[tuple[int, str]]:
    """(message id, stage to re-run), with an audit row for each, in one transaction."""
    found: list[tuple[int, str]] = []
    with db.transaction() as conn:
        for status, (stage, minutes) in STUCK.items():
            rows = conn.execute(
                "SELECT message_id FROM synedre.email_states WHERE status = %s"
                " AND status_at < now() - make_interval(mins => %s) ORDER BY status_at LIMIT %s",
                (status, minutes, BATCH)).fetchall()
            found += [(r["message_id"], stage) for r in rows]
        rows = conn.execute(
            """SELECT s.message_id FROM synedre.email_states s
                WHERE s.status = 'classified' AND s.updated_at < now() - make_interval(mins => %s)
                  AND num_nonnulls(s.run_id, s.question_id, s.negotiation_id, s.advice_id) = 0
                ORDER BY s.updated_at LIMIT %s""", (MATERIALIZE_AFTER_MIN, BATCH)).fetchall()
        found += [(r["message_id"], "materialize") for r in rows]
        for mid, stage in found:
            pipeline.audit(conn, mid, "sweep_requeued", stage=stage)
    return found


def fail_lost_launches(lock_held) -> list[int]:
    """Launches whose worker died: `spawning` with no live message lock (a running launch
    renews it). Marked failed, resumable when a session was recorded; never relaunched."""
    from synedre.db import launches

    failed = []
    with db.transaction() as conn:
        rows = conn.execute(
            """SELECT s.message_id, s.launch_attempt, l.id, l.session_id FROM synedre.email_states s
                 JOIN synedre.launches l ON l.message_id = s.message_id AND l.attempt = s.launch_attempt
                WHERE s.status = 'spawning' AND l.status = 'running' LIMIT %s""", (BATCH,)).fetchall()
        for r in rows:
            if lock_held(r["message_id"]):
                continue
            claim = launches.Claim(r["message_id"], r["launch_attempt"], r["id"])
            launches.finish(conn, claim, ok=False, status="spawn_failed", reason="worker_lost",
                            salvage={"resumable": bool(r["session_id"])})
            failed.append(r["message_id"])
    return failed
