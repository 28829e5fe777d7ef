"""The doors: every write of a message's status (`email_states.status`) is in this module,
each checked against the pipeline table (synedre/pipeline.py): a stage may leave only by one
of its exits, and only the execution that claimed a message may write its result.

A stage's own result goes through `claim`, then `write` or `release` (called by the runner,
synedre/runner/__init__.py) or `move` for a stage that does not claim the message (the QA
verdict, an approval's expiry); the launch (spawn) and its resume, the escalation, the sweep's
reclaim, an operator's retry and the admission of a new message are the other doors, each
conditional on the status it leaves.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from synedre.db import launches
from synedre.db.launches import LaunchClaim
from synedre.db.messages import audit
from synedre.db.types import Conn, FencedOut
from synedre.pipeline import BY_NAME, STAGES, LaunchStatus, Stage, Status, consumer_of, position, running_stage
from synedre.runner.results import Claim, Done, RetryRefused, Skip

SPAWN = BY_NAME["spawn"]


# -- the claimed stage's transitions -------------------------------------------------------

def claim(conn: Conn, stage: Stage, message_id: int) -> Claim | None:
    """Move the message from one of the stage's entry statuses to its running status, with a
    new attempt number; None when it is not at an entry status (see `why_not`). The state
    row comes back from the same statement, as `state_of` reads it."""
    state = conn.execute(
        f"""UPDATE synedre.email_states s SET status = %s, stage_attempt = s.stage_attempt + 1,
                   claimed_at = now(), status_at = now(), updated_at = now(),
                   waiting_reason = NULL, waiting_until = NULL
              FROM synedre.raw_messages r
             WHERE r.id = s.message_id AND s.message_id = %s AND s.status = ANY(%s)
         RETURNING s.*, {_RAW_COLUMNS}""",
        (stage.running, message_id, [str(s) for s in stage.entry])).fetchone()
    if state is None:
        return None
    return Claim(stage, message_id, state["stage_attempt"], state)


def look(conn: Conn, stage: Stage, message_id: int) -> Claim | None:
    """For a stage that does not claim the message: the message where it is, when that is
    one of the stage's entry statuses (its result is then conditional on it: `move`)."""
    state = state_of(conn, message_id)
    if state is None or state["status"] not in stage.entry:
        return None
    return Claim(stage, message_id, None, state)


# what a stage reads with the state row: the raw message's, and how many attachment rows it
# has (a stage reads those rows only when there are some: messages.attachments_of)
_RAW_COLUMNS = ("r.mailbox, r.message_id AS message_id_header, r.envelope_from, r.subject, r.dkim_pass, r.raw,"
                " (SELECT count(*) FROM synedre.attachments a WHERE a.message_id = r.id) AS attachment_count")


def state_of(conn: Conn, message_id: int) -> dict[str, Any] | None:
    return conn.execute(
        f"""SELECT s.*, {_RAW_COLUMNS}
              FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id
             WHERE s.message_id = %s""", (message_id,)).fetchone()


def why_not(conn: Conn, stage: Stage, message_id: int) -> Skip:
    """Why a stage found nothing to do, in words an operator reads."""
    row = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s",
                       (message_id,)).fetchone()
    if row is None:
        return Skip("no such message")
    status = row["status"]
    if status == stage.running:
        return Skip(f"{stage.name} already in progress")
    if (other := running_stage(status)) is not None:
        return Skip(f"at {status}: {other.name} in progress")
    if position(status) >= STAGES.index(stage):
        return Skip(f"already past {stage.name} (status {status})", moved_on=True)
    return Skip(f"not yet at {stage.name} (status {status})")


def write(conn: Conn, c: Claim, done: Done) -> None:
    """The stage's result and its audit row, only while the claim still owns the message.

    The audit carries `duration_s`, the time from the claim (its `status_at`, which lease
    renewals leave alone) to this write by the database's clock (`clock_timestamp()`, so a
    stage that claims and writes in one transaction, as materialize, is timed too):
    `synedre metrics` builds the stage histograms from these rows, whichever process or
    machine wrote them."""
    _check_exit(c.stage, done.status)
    sets = "".join(f", {k} = %({k})s" for k in done.fields)
    # the stage's own detail may not shadow what the machinery records (`||`: the right wins)
    machinery = {"stage": c.stage.name, "attempt": c.attempt}
    row = conn.execute(
        "WITH moved AS (UPDATE synedre.email_states SET status = %(status)s, updated_at = now(), status_at = now(),"
        f" claimed_at = NULL, waiting_reason = NULL, waiting_until = NULL{sets}"
        " WHERE message_id = %(id)s AND status = %(running)s AND stage_attempt = %(attempt)s"
        " RETURNING extract(epoch FROM clock_timestamp() - %(claimed)s::timestamptz)::float8 AS took)"
        " INSERT INTO synedre.audit_log (message_id, event, detail)"
        " SELECT %(id)s, %(audit_event)s, %(audit_detail)s::jsonb || %(machinery)s::jsonb"
        " || CASE WHEN took IS NULL THEN '{}'::jsonb"
        " ELSE jsonb_build_object('duration_s', round(greatest(took, 0)::numeric, 6)) END FROM moved RETURNING id",
        {"status": str(done.status), "id": c.message_id, "running": str(c.stage.running), "attempt": c.attempt,
         "claimed": c.state.get("status_at"), "audit_event": done.audit_event, "audit_detail": Jsonb(dict(done.detail)),
         "machinery": Jsonb(machinery), **done.fields}).fetchone()
    if row is None:
        raise FencedOut(f"message {c.message_id}: {c.stage.name} attempt {c.attempt} no longer owns it")


def release(conn: Conn, c: Claim, *, reason: str, event: str, until: datetime | None = None) -> bool:
    """Hand the message back to the stage's entry status to wait; False when superseded."""
    cur = conn.execute(
        """UPDATE synedre.email_states SET status = %s, claimed_at = NULL, updated_at = now(),
                  waiting_reason = %s, waiting_until = %s
            WHERE message_id = %s AND status = %s AND stage_attempt = %s""",
        (str(c.stage.entry[0]), reason, until, c.message_id, str(c.stage.running), c.attempt))
    if cur.rowcount == 1:
        audit(conn, c.message_id, event, reason=reason, stage=c.stage.name, attempt=c.attempt,
              until=until.isoformat() if until else None)
    return cur.rowcount == 1


def _check_exit(stage: Stage, status: Status) -> None:
    if status not in stage.exits:
        raise ValueError(f"stage {stage.name} cannot end in {status}")


def renew(conn: Conn, c: Claim) -> bool:
    cur = conn.execute("UPDATE synedre.email_states SET claimed_at = now() WHERE message_id = %s"
                       " AND status = %s AND stage_attempt = %s", (c.message_id, str(c.stage.running), c.attempt))
    return cur.rowcount == 1


def set_waiting(conn: Conn, message_id: int, reason: str, until: datetime | None = None) -> None:
    """Say why a message at an entry status waits (without claiming it)."""
    conn.execute("UPDATE synedre.email_states SET waiting_reason = %s, waiting_until = %s WHERE message_id = %s",
                 (reason, until, message_id))


def hold(conn: Conn, stage: Stage, message_id: int, reason: str, event: str, until: datetime | None = None) -> None:
    """Say why a message at one of the stage's entry statuses waits, without claiming it
    (launches paused, no slot, a spending cap, an approval's wait); audited once per reason."""
    row = conn.execute("SELECT status, waiting_reason FROM synedre.email_states WHERE message_id = %s",
                       (message_id,)).fetchone()
    if row is None or row["status"] not in stage.entry:
        return
    set_waiting(conn, message_id, reason, until)
    if row["waiting_reason"] != reason:
        audit(conn, message_id, event, reason=reason)


# -- the other doors -------------------------------------------------------------------------

def admit(conn: Conn, message_id: int, status: Status, attachments_dir: str | None) -> None:
    """A new message's state row, at the status ingestion gave it (poll's exits)."""
    _check_exit(BY_NAME["poll"], status)
    conn.execute("INSERT INTO synedre.email_states (message_id, status, attachments_dir) VALUES (%s, %s, %s)",
                 (message_id, str(status), attachments_dir))


def move(conn: Conn, stage: Stage, message_id: int, done: Done, *, at: Status) -> bool:
    """An unclaimed transition, conditional on the message being at `at` (one of the stage's
    entry statuses): the last QA route's verdict, the escalation of an iteration over budget.
    False (and nothing written) when the message was no longer there."""
    if at not in stage.entry:
        raise ValueError(f"stage {stage.name} does not take a message at {at}")
    _check_exit(stage, done.status)
    moved = conn.execute("UPDATE synedre.email_states SET status = %s, status_at = now(), updated_at = now(),"
                         " waiting_reason = NULL, waiting_until = NULL WHERE message_id = %s AND status = %s",
                         (str(done.status), message_id, str(at)))
    if moved.rowcount == 1:
        audit(conn, message_id, done.audit_event, **done.detail)
    return moved.rowcount == 1


def claim_launch(conn: Conn, message_id: int, *, iteration: int | None = None, **launch: Any) -> LaunchClaim | None:
    """Take the message for one launch, in the caller's transaction; None if not launchable.
    A first launch comes from `materialized` (no launch in the last hour unless an operator
    retried it); iteration n > 1 comes from `qa_failed`, after exactly n - 1 launches (None:
    the next one, by where the message is)."""
    if iteration is None:
        at = conn.execute("SELECT s.status, (SELECT count(*) FROM synedre.launches l WHERE l.message_id ="
                          " s.message_id) AS n FROM synedre.email_states s WHERE s.message_id = %s",
                          (message_id,)).fetchone()
        iteration = at["n"] + 1 if at and at["status"] == Status.QA_FAILED else 1
    if iteration > 1:
        where = ("s.status = %(from)s AND (SELECT count(*) FROM synedre.launches l"
                 " WHERE l.message_id = s.message_id) = %(done)s")
        args = {"from": str(Status.QA_FAILED), "done": iteration - 1}
    else:
        where = f"s.status = %(from)s AND {launches.LAUNCHABLE_SQL}"
        args = {"from": str(Status.MATERIALIZED), **launches.LAUNCHABLE_ARGS}
    row = conn.execute(
        f"""UPDATE synedre.email_states s
               SET status = %(to)s, launch_attempt = s.launch_attempt + 1,
                   updated_at = now(), status_at = now(), claimed_at = now(),
                   waiting_reason = NULL, waiting_until = NULL
             WHERE s.message_id = %(id)s AND {where}
            RETURNING s.launch_attempt""", {"to": str(SPAWN.running), "id": message_id, **args}).fetchone()
    if row is None:
        return None
    return launches.insert(conn, message_id, row["launch_attempt"], iteration=iteration, **launch)


def claim_resume(conn: Conn, message_id: int, launch_id: int, attempt: int) -> LaunchClaim | None:
    """Take the message back for its last launch, stopped resumable (`synedre launch resume`):
    from `spawn_failed` to `spawning` with a new attempt, only while that launch (`launch_id`,
    claimed by `attempt`) is still the message's last, failed with a session recorded. The
    same launch row runs again: its attempt moves on with the message's, it is `running`
    again, audited `spawn_resumed`. None when it is not resumable any more."""
    row = conn.execute(
        """UPDATE synedre.email_states s
               SET status = %(to)s, launch_attempt = s.launch_attempt + 1,
                   updated_at = now(), status_at = now(), claimed_at = now(),
                   waiting_reason = NULL, waiting_until = NULL
             WHERE s.message_id = %(id)s AND s.status = %(from)s AND s.launch_attempt = %(attempt)s
               AND EXISTS (SELECT 1 FROM synedre.launches l WHERE l.id = %(launch)s
                              AND l.message_id = s.message_id AND l.attempt = s.launch_attempt
                              AND l.status = %(failed)s AND l.session_id IS NOT NULL
                              AND coalesce(l.salvage->>'resumable', 'false') = 'true')
            RETURNING s.launch_attempt""",
        {"to": str(SPAWN.running), "id": message_id, "from": str(Status.SPAWN_FAILED), "attempt": attempt,
         "launch": launch_id, "failed": str(LaunchStatus.FAILED)}).fetchone()
    if row is None:
        return None
    stopped = conn.execute(
        """UPDATE synedre.launches l
               SET attempt = %s, status = %s, stop_reason = NULL, ended_at = NULL, exit_code = NULL
              FROM (SELECT stop_reason FROM synedre.launches WHERE id = %s) old
            WHERE l.id = %s RETURNING old.stop_reason""",
        (row["launch_attempt"], str(LaunchStatus.RUNNING), launch_id, launch_id)).fetchone()
    audit(conn, message_id, "spawn_resumed", attempt=row["launch_attempt"], launch_id=launch_id,
          after=stopped["stop_reason"] if stopped else None, by="operator")
    return LaunchClaim(message_id, row["launch_attempt"], launch_id)


def finish_launch(conn: Conn, c: LaunchClaim, done: Done, *, outcome: LaunchStatus, reason: str,
                  **fields: Any) -> None:
    """End the launch: its row, the message's status and the audit, fenced by the launch's
    attempt, in the caller's transaction."""
    _check_exit(SPAWN, done.status)
    launches.update(conn, c, status=str(outcome), stop_reason=reason, ended_at="now", **fields)
    conn.execute("UPDATE synedre.email_states SET status = %s, updated_at = now(), status_at = now(),"
                 " claimed_at = NULL WHERE message_id = %s AND launch_attempt = %s",
                 (str(done.status), c.message_id, c.attempt))
    audit(conn, c.message_id, done.audit_event, attempt=c.attempt, launch_id=c.launch_id, reason=reason,
          **done.detail)


def reclaim_stale(conn: Conn, stage: Stage, *, lease_s: float, batch: int) -> list[int]:
    """The sweep's door: claims of `stage` whose lease was not renewed for `lease_s` (their
    worker died) go back to the entry status, not offered again before the stage's limit."""
    rows = conn.execute(
        """UPDATE synedre.email_states SET status = %(entry)s, claimed_at = NULL,
                  updated_at = now(), waiting_reason = %(why)s,
                  waiting_until = now() + make_interval(secs => %(limit)s)
            WHERE message_id IN (
                  SELECT message_id FROM synedre.email_states
                   WHERE status = %(running)s AND claimed_at < now() - make_interval(secs => %(lease)s)
                   ORDER BY claimed_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
        RETURNING message_id""",
        {"entry": str(stage.entry[0]), "running": str(stage.running), "batch": batch,
         "limit": stage.stuck_after_s, "lease": lease_s,
         "why": f"re-offered by the sweep: {stage.name} claim not renewed for {lease_s:.0f} s"}).fetchall()
    for r in rows:
        audit(conn, r["message_id"], "sweep_reclaimed", stage=stage.name)
    return [r["message_id"] for r in rows]


def retry_target(status: str, from_stage: str | None) -> Stage:
    """The stage a message at `status` goes back to, or RetryRefused saying why not."""
    if (busy := running_stage(status)) is not None:
        raise RetryRefused(f"status {status}: {busy.name} is working on it now")
    if status == Status.PARSE_FAILED:
        raise RetryRefused("parse_failed: the message could not be read; no stage can take it")
    if status == Status.SPAWNED:
        raise RetryRefused("spawned: the launch succeeded; a launch is never repeated")
    if from_stage is None:
        stage = next((s for s in STAGES if status in s.retryable_from), None) or consumer_of(status)
        if stage is None:
            raise RetryRefused(f"status {status} is not a failure a stage can retry; give --from STAGE "
                               "to re-run an earlier stage")
        return stage
    stage = BY_NAME.get(from_stage)
    if stage is None or not stage.entry:
        raise RetryRefused(f"no stage {from_stage!r} (stages: {', '.join(s.name for s in STAGES if s.entry)})")
    if status in stage.entry or status in stage.retryable_from:
        return stage
    if status == Status.SPAWN_FAILED:
        raise RetryRefused("spawn_failed: only the launch itself is retried (--from spawn)")
    if stage.on_stuck == "fail":  # a launch is re-entered only from its own failure
        raise RetryRefused(f"status {status}: {stage.name} is re-entered only from "
                           f"{', '.join(stage.retryable_from)} (a launch never runs twice by accident)")
    if position(status) < STAGES.index(stage) - 1:
        raise RetryRefused(f"status {status} has not reached {stage.name} yet")
    return stage


def reenter(conn: Conn, message_id: int, from_stage: str | None, *, reason: str,
            by: str) -> tuple[Stage, str]:
    """Move the message to a stage's first entry status with a `retry_requested` audit;
    returns (that stage, the status it left). The attempt number moves on, so a late
    write of an older execution is fenced out. A message already at one of the stage's
    entry statuses is not moved: `retry_requeued` is audited, the caller enqueues it again."""
    row = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s FOR UPDATE",
                       (message_id,)).fetchone()
    if row is None:
        raise RetryRefused(f"no message {message_id}")
    target = retry_target(row["status"], from_stage)
    if row["status"] in target.entry:
        audit(conn, message_id, "retry_requeued", reason=reason, by=by, stage=target.name, status=row["status"])
        return target, row["status"]
    conn.execute(
        """UPDATE synedre.email_states SET status = %s, stage_attempt = stage_attempt + 1,
                  claimed_at = NULL, status_at = now(), updated_at = now(),
                  waiting_reason = NULL, waiting_until = NULL WHERE message_id = %s""",
        (str(target.entry[0]), message_id))
    audit(conn, message_id, "retry_requested", reason=reason, by=by, stage=target.name,
          from_status=row["status"], to_status=str(target.entry[0]))
    return target, row["status"]
