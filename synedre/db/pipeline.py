"""SQL of the stage machinery: claim a message, write a stage's result fenced by the claim,
release it to wait, send it back for a retry (synedre/pipeline.py declares the stages).

Claim, work, write: the claim is one short transaction; the stage's slow work happens
with no transaction open and no connection held; the write is a second short
transaction that succeeds only while the claim's attempt still owns the message.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from synedre.db.messages import audit
from synedre.db.types import Conn
from synedre.log import log
from synedre.pipeline import BY_NAME, STAGES, Stage, Status, consumer_of, position, running_stage

__all__ = ["Claim", "FencedOut", "audit", "attachments", "claim", "write", "release", "reenter", "why_not"]


class FencedOut(RuntimeError):
    """The claim was superseded (the sweep re-offered the message, an operator retried it):
    this execution must not write its result."""


@dataclass(frozen=True)
class Claim:
    stage: Stage
    message_id: int
    attempt: int
    state: dict[str, Any]  # the state row joined with its raw message, as claimed


def claim(conn: Conn, stage: Stage, message_id: int) -> Claim | None:
    """Move the message from one of the stage's entry statuses to its running status, with a
    new attempt number; None when it is not at an entry status (see `why_not`)."""
    row = conn.execute(
        """UPDATE synedre.email_states SET status = %s, stage_attempt = stage_attempt + 1,
                  claimed_at = now(), status_at = now(), updated_at = now(),
                  waiting_reason = NULL, waiting_until = NULL
            WHERE message_id = %s AND status = ANY(%s) RETURNING stage_attempt""",
        (stage.running, message_id, [str(s) for s in stage.entry])).fetchone()
    if row is None:
        return None
    state = conn.execute(
        """SELECT s.*, r.mailbox, r.message_id AS message_id_header, r.envelope_from,
                  r.subject, r.dkim_pass, r.raw
             FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id
            WHERE s.message_id = %s""", (message_id,)).fetchone()
    assert state is not None  # the row was just updated in this transaction
    return Claim(stage, message_id, row["stage_attempt"], state)


def why_not(conn: Conn, stage: Stage, message_id: int) -> str:
    """Why `claim` found nothing to do, in words an operator reads."""
    row = conn.execute("SELECT status, waiting_reason FROM synedre.email_states WHERE message_id = %s",
                       (message_id,)).fetchone()
    if row is None:
        return "no such message"
    status = row["status"]
    if status == stage.running:
        return f"{stage.name} already in progress"
    if running_stage(status) is not None:
        return f"at {status}: {running_stage(status).name} in progress"  # type: ignore[union-attr]
    here = STAGES.index(stage)
    if position(status) >= here:
        return f"already past {stage.name} (status {status})"
    return f"not yet at {stage.name} (status {status})"


def write(conn: Conn, c: Claim, status: Status, event: str,
          detail: dict[str, Any] | None = None, **fields: Any) -> None:
    """The stage's result and its audit row, in the caller's transaction, only while the
    claim still owns the message (else FencedOut, and the transaction rolls back).

    The audit carries `duration_s`, the time from the claim (its `status_at`, which lease
    renewals leave alone) to this write by the database's clock (`clock_timestamp()`, so a
    stage that claims and writes in one transaction, as materialize, is timed too):
    `synedre metrics` builds the stage histograms from these rows, whichever process or
    machine wrote them."""
    if status not in c.stage.exits:
        raise ValueError(f"stage {c.stage.name} cannot end in {status}")
    sets = "".join(f", {k} = %({k})s" for k in fields)
    row = conn.execute(
        "UPDATE synedre.email_states SET status = %(status)s, updated_at = now(), status_at = now(),"
        f" claimed_at = NULL, waiting_reason = NULL, waiting_until = NULL{sets}"
        " WHERE message_id = %(id)s AND status = %(running)s AND stage_attempt = %(attempt)s"
        " RETURNING extract(epoch FROM clock_timestamp() - %(claimed)s::timestamptz)::float8 AS duration_s",
        {"status": str(status), "id": c.message_id, "running": str(c.stage.running), "attempt": c.attempt,
         "claimed": c.state.get("status_at"), **fields}).fetchone()
    if row is None:
        raise FencedOut(f"message {c.message_id}: {c.stage.name} attempt {c.attempt} no longer owns it")
    took = {} if row["duration_s"] is None else {"duration_s": round(max(row["duration_s"], 0.0), 6)}
    # the stage's own detail may not shadow what the machinery records
    audit(conn, c.message_id, event, **{**(detail or {}), "stage": c.stage.name, "attempt": c.attempt, **took})


def release(conn: Conn, c: Claim, *, reason: str, event: str,
            until: datetime | None = None, **detail: Any) -> bool:
    """Hand the message back to the stage's entry status to wait (a retry later, a held
    launch), saying why and until when. False when the claim was superseded meanwhile."""
    cur = conn.execute(
        """UPDATE synedre.email_states SET status = %s, claimed_at = NULL, updated_at = now(),
                  waiting_reason = %s, waiting_until = %s
            WHERE message_id = %s AND status = %s AND stage_attempt = %s""",
        (str(c.stage.entry[0]), reason, until, c.message_id, str(c.stage.running), c.attempt))
    if cur.rowcount == 1:
        audit(conn, c.message_id, event, reason=reason, stage=c.stage.name, attempt=c.attempt,
              until=until.isoformat() if until else None, **detail)
    return cur.rowcount == 1


def set_waiting(conn: Conn, message_id: int, reason: str, until: datetime | None = None) -> None:
    """Say why a message at an entry status waits (without claiming it)."""
    conn.execute("UPDATE synedre.email_states SET waiting_reason = %s, waiting_until = %s WHERE message_id = %s",
                 (reason, until, message_id))


class RetryRefused(ValueError):
    """`synedre retry` cannot send this message back (the reason is the message)."""


def retry_target(status: str, from_stage: str | None) -> Stage:
    """The stage a message at `status` goes back to, or RetryRefused saying why not."""
    if running_stage(status) is not None:
        raise RetryRefused(f"status {status}: {running_stage(status).name} is working on it now")  # type: ignore[union-attr]
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
                           f"{', '.join(stage.retryable_from)}; a launch that succeeded is never repeated")
    if position(status) < STAGES.index(stage) - 1:
        raise RetryRefused(f"status {status} has not reached {stage.name} yet")
    return stage


def reenter(conn: Conn, message_id: int, from_stage: str | None, *, reason: str,
            by: str) -> tuple[Stage, str]:
    """Move the message to a stage's first entry status with a `retry_requested` audit;
    returns (that stage, the status it left). The attempt number moves on, so a late
    write of an older execution is fenced out."""
    row = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s FOR UPDATE",
                       (message_id,)).fetchone()
    if row is None:
        raise RetryRefused(f"no message {message_id}")
    target = retry_target(row["status"], from_stage)
    conn.execute(
        """UPDATE synedre.email_states SET status = %s, stage_attempt = stage_attempt + 1,
                  claimed_at = NULL, status_at = now(), updated_at = now(),
                  waiting_reason = NULL, waiting_until = NULL WHERE message_id = %s""",
        (str(target.entry[0]), message_id))
    audit(conn, message_id, "retry_requested", reason=reason, by=by, stage=target.name,
          from_status=row["status"], to_status=str(target.entry[0]))
    return target, row["status"]


def attachments(conn: Conn, message_id: int) -> list[dict[str, Any]]:
    return conn.execute("SELECT * FROM synedre.attachments WHERE message_id = %s ORDER BY idx",
                        (message_id,)).fetchall()


# A claim is a lease: the execution holding it renews it every CLAIM_RENEW_S; one not
# renewed for CLAIM_LEASE_S belongs to a dead worker and the sweep offers the message again.
CLAIM_RENEW_S = 10.0
CLAIM_LEASE_S = 40.0


def renew(conn: Conn, c: Claim) -> bool:
    cur = conn.execute("UPDATE synedre.email_states SET claimed_at = now() WHERE message_id = %s"
                       " AND status = %s AND stage_attempt = %s", (c.message_id, str(c.stage.running), c.attempt))
    return cur.rowcount == 1


@contextmanager
def working(c: Claim) -> Iterator[None]:
    """Around a stage's work and write: the claim's lease is renewed in the background, and
    an error hands the message back to its entry status with the reason (audit
    `stage_error`), so a retry or the sweep can take it at once instead of finding it
    claimed; the error is then re-raised for the task to handle."""
    from synedre import db

    stop = threading.Event()

    def keep_alive() -> None:
        while not stop.wait(CLAIM_RENEW_S):
            try:
                with db.transaction() as conn:
                    if not renew(conn, c):
                        return  # superseded or written: nothing left to renew
            except Exception as exc:  # the database may be restarting: try again next period
                log.warning("claim_renew_failed", message=c.message_id, stage=c.stage.name,
                            error=type(exc).__name__)
    beat = threading.Thread(target=keep_alive, name=f"lease-{c.message_id}", daemon=True)
    beat.start()
    try:
        yield
    except FencedOut:
        raise
    except BaseException as exc:
        reason = f"error: {type(exc).__name__}: {exc}"[:300]
        try:
            with db.transaction() as conn:
                release(conn, c, reason=reason, event="stage_error")
        except Exception as again:  # the database itself may be what failed
            log.warning("stage_release_failed", message=c.message_id, stage=c.stage.name,
                        error=type(again).__name__)
        raise
    finally:
        stop.set()
