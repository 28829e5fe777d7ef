"""The stage runner: it calls a stage in one direction and writes its result through a door.

A stage is a small object (`StageCode`) with three methods the runner calls in order:

1. `load(conn, claim)`, in the claim's transaction: what the work needs from the database;
2. `work(claim, loaded)`, with no transaction open and no connection held: the slow part
   (clamd, OCR, the LLM, a deploy, a browser, SMTP), returning a plain value;
3. `write(conn, claim, worked)`, in a second short transaction: the stage's rows, and its
   result as a typed value (`Done`, `Held`, `Skip`), which the runner writes through a door
   (synedre/runner/doors.py) in that same transaction;

then `after(claim, worked, result)` once a result is written and committed (a log line, files removed). Nothing
comes back as a closure and nothing leaves through a mutable argument. When the work has nothing
slow to do for what was loaded (`instant`: materialize; scan and OCR of mail without
attachments), it is worked and written in the claim's transaction: one transaction, no lease.

A stage whose pipeline entry has a running status claims the message (`doors.claim`, with
a new attempt number that fences its write: a superseded execution writes nothing,
`FencedOut`); between the claim and the write the claim is a lease renewed in the
background, and an error hands the message back to its entry status at once (audit
`stage_error`). A stage with none (`approval`, `qa_route`) works on the message where it
is: its `Done` moves it only if it is still at the status it was found at (`doors.move`).
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import ClassVar, Generic, TypeVar

from synedre import db
from synedre.config import get_settings
from synedre.db.messages import audit
from synedre.db.types import Conn, FencedOut
from synedre.log import log
from synedre.pipeline import LaunchStatus, Stage
from synedre.runner import doors
from synedre.runner.doors import (
    admit,
    claim,
    claim_launch,
    claim_resume,
    finish_launch,
    hold,
    move,
    reclaim_stale,
    reenter,
    retry_target,
    set_waiting,
    why_not,
)
from synedre.runner.results import Claim, Done, Held, Result, RetryRefused, Skip

L = TypeVar("L")
W = TypeVar("W")


class StageCode(ABC, Generic[L, W]):
    """One stage of the pipeline table, as the runner calls it (see the module's docstring).
    `door`: how the runner takes the message — None, by the pipeline table (claimed when the
    stage has a running status, else found where it is); "look", found where it is; "launch",
    claimed for a new launch; "resume", claimed back for the launch `resumes` names."""
    stage: ClassVar[Stage]
    door: ClassVar[str | None] = None
    resumes: tuple[int, int] | None = None  # (launch id, the attempt that claimed it)

    @abstractmethod
    def load(self, conn: Conn, claim: Claim) -> L | Skip:
        """What the work needs, read in the claim's transaction. A stage that does not claim
        the message may answer `Skip` here (nothing for it to do)."""

    @abstractmethod
    def work(self, claim: Claim, loaded: L) -> W:
        """The slow part, with no transaction open."""

    @abstractmethod
    def write(self, conn: Conn, claim: Claim, worked: W) -> Result:
        """The stage's rows and its result, in the write's transaction."""

    def instant(self, loaded: L) -> bool:
        """True when the work has nothing slow to do for what was loaded (materialize, only
        SQL; scan and OCR of mail without attachments): the runner then works and writes in
        the claim's own transaction, which a failure rolls back whole."""
        return False

    def after(self, claim: Claim, worked: W, result: Done | Held) -> None:
        """Once the result is written and committed: what must not happen before (nothing by
        default). Not called when nothing was written (`Skip`)."""


class _MovedMeanwhile(Exception):
    """An unclaimed stage's message left the status it was found at: its write is undone."""


def run(code: StageCode[L, W], message_id: int) -> Result:
    """Take the message, load, work with no transaction open, write, then `after` (a stage
    with no slow work for what it loaded, `instant`: all in the claim's transaction)."""
    stage = code.stage
    instant = False
    try:
        with db.transaction() as conn:
            found = _take(conn, code, message_id)
            if found is None:
                return why_not(conn, stage, message_id)
            loaded = code.load(conn, found)
            if not isinstance(loaded, Skip) and code.instant(loaded):
                instant = True  # a failure here rolls the claim back with the rest: the message stays where it was
                worked = code.work(found, loaded)
                result = settle(conn, found, code.write(conn, found, worked))
    except _MovedMeanwhile as exc:
        return Skip(str(exc))
    except Exception as exc:
        if instant and found is not None and found.attempt is not None:
            _rolled_back(found, exc)
        raise
    if isinstance(loaded, Skip):
        if found.attempt is not None:
            raise TypeError(f"stage {stage.name} claimed message {message_id}: it must write a result")
        return loaded
    if not instant:
        with working(found):
            worked = code.work(found, loaded)
            try:
                with db.transaction() as conn:
                    result = settle(conn, found, code.write(conn, found, worked))
            except _MovedMeanwhile as exc:
                return Skip(str(exc))
    if not isinstance(result, Skip):
        code.after(found, worked, result)
    return result


def _rolled_back(c: Claim, exc: Exception) -> None:
    """An instant stage failed and its claim rolled back with the rest: the message is at its
    entry status again, as a handed-back claim would be, and says why as one would (its waiting
    reason, audit `stage_error`), so an operator reads the cause of a retry or a stuck message."""
    reason = f"error: {type(exc).__name__}: {exc}"[:300]
    try:
        with db.transaction() as conn:
            conn.execute("UPDATE synedre.email_states SET waiting_reason = %s, updated_at = now()"
                         " WHERE message_id = %s AND status = ANY(%s)",
                         (reason, c.message_id, [str(s) for s in c.stage.entry]))
            audit(conn, c.message_id, "stage_error", reason=reason, stage=c.stage.name, attempt=c.attempt,
                  rolled_back=True)
    except Exception as again:  # the database itself may be what failed
        log.error("stage_error_unrecorded", message=c.message_id, stage=c.stage.name, error=type(again).__name__)


def _take(conn: Conn, code: StageCode[L, W], message_id: int) -> Claim | None:
    stage, door = code.stage, code.door or ("claim" if code.stage.running else "look")
    if door == "claim":
        return claim(conn, stage, message_id)
    if door == "look":
        return doors.look(conn, stage, message_id)
    launch = claim_resume(conn, message_id, *code.resumes) if door == "resume" and code.resumes \
        else claim_launch(conn, message_id) if door == "launch" else None
    if launch is None:
        return None
    state = doors.state_of(conn, message_id)
    assert state is not None  # claimed in this transaction
    return Claim(stage, message_id, launch.attempt, state, launch)


def settle(conn: Conn, c: Claim, result: Result) -> Result:
    """Write a stage's result in the caller's transaction, through the door its claim allows."""
    if c.attempt is None:  # not claimed: conditional on the status it was found at
        if isinstance(result, Done) and not move(conn, c.stage, c.message_id, result, at=c.state["status"]):
            raise _MovedMeanwhile(f"moved meanwhile from {c.state['status']}: nothing written")
        if isinstance(result, Held):
            hold(conn, c.stage, c.message_id, result.why, result.event, result.until)
        return result
    if isinstance(result, Skip):
        raise TypeError(f"stage {c.stage.name} claimed message {c.message_id}: a Skip writes nothing")
    if c.launch is not None:  # a launch ends once, its row with the message
        if not isinstance(result, Done):
            raise TypeError(f"launch {c.launch.launch_id}: a launch ends with its verdict (Done)")
        row = dict(result.fields)
        finish_launch(conn, c.launch, replace(result, fields={}), outcome=LaunchStatus(row.pop("status")),
                      reason=row.pop("stop_reason"), **row)
    elif isinstance(result, Done):
        doors.write(conn, c, result)
    elif not doors.release(conn, c, reason=result.why, event=result.event, until=result.until):
        raise FencedOut(f"message {c.message_id}: {c.stage.name} attempt {c.attempt} no longer owns it")
    return result


@contextmanager
def working(c: Claim) -> Iterator[None]:
    """Around a claimed stage's work and write: the claim's lease is renewed in the
    background, and an error hands the message back to its entry status with the reason
    (audit `stage_error`), so a retry or the sweep can take it at once instead of finding it
    claimed; the error is then re-raised for the task to handle."""
    if c.attempt is None or c.launch is not None:  # a launch's lease is its lock (the sweep fails a lost one)
        yield
        return
    stop, every_s = threading.Event(), get_settings().claim_lease_s / 4  # the lease: claim_lease_s

    def keep_alive() -> None:
        while not stop.wait(every_s):
            try:
                with db.transaction() as conn:
                    if not doors.renew(conn, c):
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
                doors.release(conn, c, reason=reason, event="stage_error")
        except Exception as again:  # the database itself may be what failed
            log.warning("stage_release_failed", message=c.message_id, stage=c.stage.name,
                        error=type(again).__name__)
        raise
    finally:
        stop.set()


__all__ = ["Claim", "Done", "FencedOut", "Held", "Result", "RetryRefused", "Skip", "StageCode",
           "admit", "claim", "claim_launch", "claim_resume", "finish_launch", "hold", "move", "reclaim_stale",
           "reenter", "retry_target", "run", "set_waiting", "settle", "why_not", "working"]
