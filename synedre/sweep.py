"""The sweep (beat, every `sweep_every_s`): find messages stuck at a stage and hand them on
again, from the pipeline table's per-stage limits (SPEC §12, §12b).

- At an entry status longer than the stage's limit (its task was lost: a broker restart,
  an enqueue that never happened): re-enqueued. Re-offering is idempotent (the stage's
  claim), so a message that was in fact queued costs one no-op task.
- Claimed (in-progress status) with a lease not renewed for `claim_lease_s` (its worker
  died mid-work): the claim is released back to the entry status and re-enqueued; a later
  write of the dead execution is fenced out by the attempt number. A launch is never
  re-offered: a lost launch is failed (`fail_lost_launches`), resumable, never run twice.
- The broker lost its data (Redis restarted empty: the epoch key is gone): every message
  at an entry status is re-enqueued at once, whatever its age (`broker_epoch_lost`). For a
  launch lock's lifetime after that, a launch without its lock is not taken for lost
  (`launch_locks_trusted`): it may still run, until its next renewal finds the lock gone.
"""
from __future__ import annotations

from synedre import db, runner
from synedre.config import get_settings
from synedre.db import messages
from synedre.db.launches import LaunchClaim
from synedre.pipeline import STAGES, LaunchStatus, QaCheckStatus, Stage, Status

BATCH = 200
EPOCH_KEY = "synedre:broker:epoch"  # set once per Redis lifetime; gone = queued tasks are gone too


def broker_epoch_lost(r) -> bool:
    """True once after the broker's data was lost (or on the very first run): the caller
    then re-offers everything. Atomic, so one sweep among several does it. The epoch is the
    Redis server's clock, which every sweep reads alike."""
    secs, micros = r.time()
    return bool(r.set(EPOCH_KEY, f"{secs}.{micros:06d}", nx=True))


def launch_locks_trusted(r) -> bool:
    """Whether a launch lock missing from Redis means its launch is gone. Not until the
    epoch is a lock's lifetime old: a launch running when the broker lost its data lost its
    lock with it, and keeps running until its next renewal (within its lifetime) finds that
    out and stops it; failing it as lost before would alert the founder of a launch still
    running, and free its place under the cap while its agent works."""
    raw = r.get(EPOCH_KEY)
    if raw is None:
        return False
    try:
        since = float(raw)
    except ValueError:
        return True  # not a time: nothing says when the data was lost
    secs, micros = r.time()
    return secs + micros / 1e6 - since >= get_settings().spawn_lock_ttl_s


def waiting_everywhere(stages: tuple[Stage, ...] = STAGES) -> list[tuple[int, str]]:
    """Every message at an entry status, whatever its age, with the stage that takes it."""
    with db.transaction() as conn:
        return [(r["message_id"], s.name) for s in stages if s.entry for r in conn.execute(
            "SELECT message_id FROM synedre.email_states WHERE status = ANY(%s) ORDER BY status_at",
            ([str(x) for x in s.entry],))]


def find_stuck(stages: tuple[Stage, ...] = STAGES) -> list[tuple[int, str]]:
    """(message id, stage to run), with an audit row each, in one short transaction.
    A re-offered message is not offered again before another full limit has passed."""
    found: list[tuple[int, str]] = []
    lease_s = get_settings().claim_lease_s
    with db.transaction() as conn:
        for stage in stages:
            if not stage.entry:
                continue
            if stage.running is not None and stage.on_stuck == "requeue":
                found += [(mid, stage.name) for mid in runner.reclaim_stale(conn, stage, lease_s=lease_s,
                                                                            batch=BATCH)]
            for r in conn.execute(
                    """UPDATE synedre.email_states SET waiting_reason = %(why)s,
                              waiting_until = now() + make_interval(secs => %(limit)s)
                        WHERE message_id IN (
                              SELECT message_id FROM synedre.email_states
                               WHERE status = ANY(%(entry)s)
                                 AND status_at < now() - make_interval(secs => %(limit)s)
                                 AND (waiting_until IS NULL OR waiting_until < now())
                               ORDER BY status_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
                    RETURNING message_id""",
                    {"entry": [str(s) for s in stage.entry], "limit": stage.stuck_after_s, "batch": BATCH,
                     "why": f"re-offered by the sweep: waited for {stage.name} over {stage.stuck_after_s} s"}):
                if (r["message_id"], stage.name) not in found:
                    found.append((r["message_id"], stage.name))
                    messages.audit(conn, r["message_id"], "sweep_requeued", stage=stage.name)
    return found


def pending_routes(message_id: int) -> int:
    """Routes of the message's current QA run still to check (one task each), at least 1."""
    with db.transaction() as conn:
        row = conn.execute(
            """SELECT count(*) AS n FROM synedre.qa_checks c JOIN synedre.qa_runs r ON r.id = c.qa_run_id
                WHERE r.message_id = %s AND r.verdict IS NULL AND c.status = ANY(%s)""",
            (message_id, [str(QaCheckStatus.PENDING), str(QaCheckStatus.RUNNING)])).fetchone()
    return max(1, row["n"] if row else 1)


def fail_lost_launches(lock_held) -> list[int]:
    """Launches whose worker died: `spawning` with no live message lock (a running launch
    renews it). Marked failed, resumable when a session was recorded; never relaunched."""
    failed = []
    with db.transaction() as conn:
        rows = conn.execute(
            """SELECT s.message_id, s.launch_attempt, l.id, l.session_id FROM synedre.email_states s
                 JOIN synedre.launches l ON l.message_id = s.message_id AND l.attempt = s.launch_attempt
                WHERE s.status = %s AND l.status = %s LIMIT %s""",
            (str(Status.SPAWNING), str(LaunchStatus.RUNNING), BATCH)).fetchall()
        for r in rows:
            if lock_held(r["message_id"]):
                continue
            claim = LaunchClaim(r["message_id"], r["launch_attempt"], r["id"])
            runner.finish_launch(conn, claim, runner.Done(Status.SPAWN_FAILED),
                                 outcome=LaunchStatus.FAILED, reason="worker_lost",
                                 salvage={"resumable": bool(r["session_id"])})
            failed.append(r["message_id"])
    return failed
