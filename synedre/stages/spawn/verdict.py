"""A launch's verdict (SPEC §8: never the exit code alone) and its spending caps."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from synedre import runner
from synedre.config import Settings
from synedre.db import launches
from synedre.pipeline import LaunchStatus, Status
from synedre.spawn import failure, launcher

SUCCESS_STATUS, FAILED_STATUS = Status.SPAWNED, Status.SPAWN_FAILED


@dataclass(frozen=True)
class LaunchVerdict:
    ok: bool
    reason: str
    status: Status | None = None  # the message's status when it is not spawned / spawn_failed

    @property
    def message_status(self) -> Status:
        return self.status or (SUCCESS_STATUS if self.ok else FAILED_STATUS)

    def done(self, outcome: LaunchStatus, **row: Any) -> runner.Done:
        """The launch's end: the message's status, and the launch row's columns (its outcome,
        the reason, what else it recorded), written together by the runner."""
        return runner.Done(self.message_status, "spawn_action_done" if self.ok else str(Status.SPAWN_FAILED),
                           fields={"status": str(outcome), "stop_reason": self.reason, **row})


@dataclass(frozen=True)
class OverBudget:
    reason: str
    fleet: bool  # the fleet's day, not the message's own total: an incident too

    def __str__(self) -> str:
        return self.reason


def over_budget(conn: Any, message_id: int, s: Settings) -> OverBudget | None:
    """Spending fails closed: the message's own total, then the fleet's day."""
    row = conn.execute(
        """SELECT (SELECT coalesce(sum(cost_usd), 0) FROM synedre.launches WHERE message_id = %s) AS mine,
                  (SELECT usd FROM synedre.spend_today) AS day""",  # launches and persona asks
        (message_id,)).fetchone()
    if row["mine"] >= s.max_message_cost_usd:
        return OverBudget(f"message cost {row['mine']} >= {s.max_message_cost_usd} USD", fleet=False)
    if row["day"] >= s.daily_spend_cap_usd:
        return OverBudget(f"fleet spend today {row['day']} >= {s.daily_spend_cap_usd} USD", fleet=True)
    return None


def budget_left(s: Settings, spent: float) -> float:
    """What remains of a launch's spending budget (SYNEDRE_MAX_BUDGET_USD: one for the launch and
    all its resumes, each given only the rest), down to the cent; 0 when less than a cent is left."""
    return max(0.0, math.floor((s.max_budget_usd - spent) * 100 + 1e-6) / 100)


def succeeded(outcome: launcher.RunOutcome, max_turns: int | None, contract_valid: bool,
              contract_committed: bool = False) -> LaunchVerdict:
    """SPEC §8: never trust the exit code alone. A contract file in the agent's commits is
    refused whatever it says: the launch's contract lives outside the repository, and one
    that travels with the code could pass for a later launch's."""
    r = outcome.result
    if r is None:
        return LaunchVerdict(False, outcome.stop_reason)
    if r.subtype == "success" and r.is_error:  # the CLI's API calls failed: its own words, classified
        return LaunchVerdict(False, failure.reason(r.raw))
    if r.subtype != "success" or r.is_error:
        return LaunchVerdict(False, f"result:{r.subtype}:is_error={r.is_error}")
    if r.permission_denials:
        return LaunchVerdict(False, "permission_denials")
    if max_turns is not None and (r.num_turns or 0) > max_turns:
        return LaunchVerdict(False, "turn_cap_exceeded")
    if contract_committed:
        return LaunchVerdict(False, "contract_committed")
    if not contract_valid:
        return LaunchVerdict(False, "invalid_contract")
    return LaunchVerdict(True, "success")


def resumable(conn: Any, message_id: int, s: Settings) -> dict[str, Any] | str:
    """The message's last launch when it can be resumed by hand, else why not, in words an
    operator reads: the message at `spawn_failed`, its last launch stopped by a timeout (or
    its worker lost) with its session recorded, the message's spending caps not reached."""
    state = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (message_id,)).fetchone()
    if state is None:
        return "no such message"
    row = launches.latest(conn, message_id)
    if row is None:
        return f"no launch yet (status {state['status']})"
    if state["status"] != FAILED_STATUS:
        return f"status {state['status']}: only a message whose launch failed ({FAILED_STATUS}) is resumed"
    if row["status"] != LaunchStatus.FAILED or not (row["salvage"] or {}).get("resumable") or not row["session_id"]:
        return (f"launch #{row['id']} ended {row['stop_reason']}: not resumable (only a launch stopped by a timeout"
                " or the loss of its worker, with its session recorded, is)")
    if over := over_budget(conn, message_id, s):
        return f"spending cap: {over}"
    if budget_left(s, float(row["cost_usd"] or 0)) <= 0:
        return (f"launch #{row['id']}'s spending budget is spent: {float(row['cost_usd']):.2f} of"
                f" {s.max_budget_usd:.2f} USD (SYNEDRE_MAX_BUDGET_USD, one for all its runs)")
    return row
