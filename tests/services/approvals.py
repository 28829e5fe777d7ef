"""The approval doors as the stages take them, in the caller's transaction: what the spawn
stage's `Admit` and the approval stage's expiry write through the runner (synedre/stages),
for tests that set up or inspect requests inside one transaction."""
from __future__ import annotations

from typing import Any

from synedre import runner
from synedre.approvals import decisions
from synedre.config import Settings
from synedre.pipeline import BY_NAME, Status


def gate(conn: Any, state: dict[str, Any], kind: str, model: str, s: Settings) -> runner.Done | int | None:
    """The approved request's id, None (no rule asks), or the message moved to
    `awaiting_approval` with its request opened."""
    mid = state["message_id"]
    if (ok := decisions.approved(conn, mid)) is not None:
        return ok
    told = decisions.asks(conn, state, kind, model, s)
    if told is None:
        return None
    done = decisions.ask_launch(conn, mid, told)
    assert runner.move(conn, BY_NAME["spawn"], mid, done, at=Status.MATERIALIZED)
    return done


def expire(conn: Any, message_id: int) -> bool:
    """A request past its expiry ended and its message `refused`; False if it was not due."""
    done = decisions.expired(conn, message_id)
    return done is not None and runner.move(conn, BY_NAME["approval"], message_id, done,
                                            at=Status.AWAITING_APPROVAL)
