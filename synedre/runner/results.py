"""What a stage hands the runner: typed results, and the claim it works under."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from synedre.db.launches import LaunchClaim
from synedre.pipeline import Stage, Status


@dataclass(frozen=True)
class Done:
    """The stage's work is done: the message moves to `status`, one of the stage's exits."""
    status: Status
    event: str | None = None  # the audit event; the status's own name when None
    detail: Mapping[str, Any] = field(default_factory=dict)
    fields: Mapping[str, Any] = field(default_factory=dict)  # columns of the state row written with it

    @property
    def audit_event(self) -> str:
        return str(self.event or self.status)


@dataclass(frozen=True)
class Held:
    """Back to the stage's entry status to wait: why (the waiting reason an operator reads),
    until when, the audit event. `retry`: the task should run the stage again later."""
    why: str
    event: str
    until: datetime | None = None
    retry: bool = False


@dataclass(frozen=True)
class Skip:
    """Nothing done, nothing written. `moved_on`: the message is past this stage, and the
    task of the stage it waits for may have been lost (a worker killed between its commit
    and its enqueue): the caller offers it that stage again."""
    why: str
    moved_on: bool = False


Result = Done | Held | Skip


class RetryRefused(ValueError):
    """`synedre retry` cannot send this message back (the reason is the message)."""


@dataclass(frozen=True)
class Claim:
    """A message as a stage took it: `attempt` fences its write (None: a stage that works on
    the message without claiming it, whose result is conditional on the status it found);
    `launch`: a launch's claim (its row, fenced by the message's launch attempt)."""
    stage: Stage
    message_id: int
    attempt: int | None
    state: dict[str, Any]  # the state row joined with its raw message, as read
    launch: LaunchClaim | None = None
