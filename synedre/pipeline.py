"""The pipeline as data: every status a message can be in, and every stage that moves it.

Open this module first. Each stage claims a message at one of its entry statuses (moving
it to the stage's in-progress status, with a new attempt number), works with no
transaction open, then writes one of its exit statuses, conditional on that attempt; the
stage runner (synedre/runner/doors.py) does all three, and checks each exit against this table.
The next stage is the one whose entry statuses hold the exit. Tasks and their routes,
the Celery queues, the sweep, `synedre status`, `synedre retry` and the fleet's worker
groups are all derived from `STAGES` and `WORKER_GROUPS`: nobody retypes a status.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, NamedTuple


class Status(StrEnum):
    """Stored values of `email_states.status` (the schema's CHECK lists the same)."""
    RECEIVED = "received"
    PARSE_FAILED = "parse_failed"
    SCANNING = "scanning"
    SCANNED = "scanned"
    BLOCKED_UNSAFE_ATTACHMENT = "blocked_unsafe_attachment"
    READING = "reading"  # OCR in progress
    READ = "read"  # OCR done (or nothing to read)
    CLASSIFYING = "classifying"
    CLASSIFIED = "classified"
    CLASSIFY_FAILED = "classify_failed"
    MATERIALIZING = "materializing"
    MATERIALIZED = "materialized"
    NOISE = "noise"
    # A launch the approval policy holds (synedre/approvals): it waits for the founder's OK.
    AWAITING_APPROVAL = "awaiting_approval"
    REFUSED = "refused"  # the founder (or an operator) said no, or the request expired
    SPAWNING = "spawning"
    SPAWNED = "spawned"
    SPAWN_FAILED = "spawn_failed"
    # The agent succeeded but its commits could not be merged into the trunk (a dirty or
    # moved trunk, a conflict, a branch that did not come back): never a success.
    MERGE_FAILED = "merge_failed"
    DEPLOYING = "deploying"  # reading the contract, deciding the path, running ./deploy
    DEPLOYED = "deployed"
    QA_PLANNING = "qa_planning"  # routes resolved against the sitemap, one check each queued
    QA = "qa"  # route checks running on the QA workers; the last one moves the message on
    QA_PASSED = "qa_passed"
    QA_FAILED = "qa_failed"  # deploy or QA failed: the agent iterates, or it escalates
    REPORT_DUE = "report_due"  # no-code path: nothing to deploy, the recap is next
    REPORTING = "reporting"
    ACTIONED = "actioned"
    ORCHESTRATION_FAILED = "orchestration_failed"
    ESCALATED = "escalated"


# The other state machines, each with its own table, its own single writer and the schema's
# CHECK listing the same values.

class LaunchStatus(StrEnum):
    """`launches.status`, written by synedre/runner/doors.py (the claim inserts `running`)."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"  # the agent's sandbox could not start: no agent ran
    MERGE_FAILED = "merge_failed"  # the agent succeeded; its commits could not reach the trunk


class QaCheckStatus(StrEnum):
    """`qa_checks.status`: one route of a QA run (synedre/qa/stage.py)."""
    PENDING = "pending"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"


class OutboundStatus(StrEnum):
    """`outbound_mail.status`: one mail to the founder (written only by synedre/mail/outbox.py)."""
    DRAFTING = "drafting"
    DRAFT_SAVED = "draft_saved"
    SENDING = "sending"
    SENT = "sent"
    SEND_UNKNOWN = "send_unknown"


class AskStatus(StrEnum):
    """`agent_asks.status`: one question to a persona (synedre/agents.py)."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REFUSED = "refused"


class ApprovalStatus(StrEnum):
    """`approvals.status`: one request for the founder's OK (synedre/approvals)."""
    WAITING = "waiting"  # mailed, not decided yet
    APPROVED = "approved"
    REFUSED = "refused"
    EXPIRED = "expired"


class IncidentStatus(StrEnum):
    """`incidents.status`: one incident mailed into the Atlas inbox (synedre/incidents.py)."""
    RAISING = "raising"
    MAILED = "mailed"
    FAILED = "failed"


MACHINES: dict[str, type[StrEnum]] = {
    "email_states": Status, "launches": LaunchStatus, "qa_checks": QaCheckStatus,
    "outbound_mail": OutboundStatus, "agent_asks": AskStatus, "incidents": IncidentStatus,
    "approvals": ApprovalStatus}


# Where a message's journey ends. The founder hears of every one after a launch: a recap
# (actioned) or an alert (spawn_failed, merge_failed, orchestration_failed, escalated).
TERMINAL = frozenset({Status.PARSE_FAILED, Status.BLOCKED_UNSAFE_ATTACHMENT, Status.CLASSIFY_FAILED,
                      Status.NOISE, Status.REFUSED, Status.SPAWN_FAILED, Status.MERGE_FAILED, Status.ACTIONED,
                      Status.ORCHESTRATION_FAILED, Status.ESCALATED})
FAILED = frozenset({Status.PARSE_FAILED, Status.BLOCKED_UNSAFE_ATTACHMENT, Status.CLASSIFY_FAILED,
                    Status.SPAWN_FAILED, Status.MERGE_FAILED, Status.ORCHESTRATION_FAILED, Status.ESCALATED})
# Terminal failures after a launch that the founder is told about by mail (an alert).
ALERTED = frozenset({Status.SPAWN_FAILED, Status.MERGE_FAILED, Status.ORCHESTRATION_FAILED, Status.ESCALATED})


@dataclass(frozen=True)
class Stage:
    name: str  # also the task name (`synedre.<name>`) and, here, the queue
    queue: str
    group: str  # the worker group of `synedre fleet` that serves the queue
    entry: tuple[Status, ...]  # statuses it claims from
    running: Status | None  # while claimed
    exits: tuple[Status, ...]  # statuses it may write
    stuck_after_s: int  # in an entry or running status longer than this: the sweep acts
    # what the sweep does with a claim older than stuck_after_s: offer it again, or (for a
    # launch, which must never run twice) leave it to the launch's own recovery
    on_stuck: Literal["requeue", "fail"] = "requeue"
    # a failure exit that `synedre retry` may send back to this stage's first entry status
    retryable_from: tuple[Status, ...] = ()


# How long a message may wait at a stage's entry status before the sweep offers it again:
# its task may have been lost (a worker killed between its commit and its enqueue, a broker
# that lost its data). Offering again is idempotent (the claim), so erring short is cheap;
# a claimed message is covered by its lease instead (the setting claim_lease_s).
ENTRY_WAIT_S = 45
# How long a request for the founder's OK stays open: the approval stage's stuck limit, so
# the sweep offers the message again when it is due, and the stage ends it `refused`.
APPROVAL_EXPIRY_S = 24 * 3600

STAGES: tuple[Stage, ...] = (
    Stage("poll", "poll", "ingest", (), None, (Status.RECEIVED, Status.PARSE_FAILED), 0),
    Stage("scan", "scan", "read", (Status.RECEIVED,), Status.SCANNING,
          (Status.SCANNED, Status.BLOCKED_UNSAFE_ATTACHMENT), ENTRY_WAIT_S,
          retryable_from=(Status.BLOCKED_UNSAFE_ATTACHMENT,)),
    Stage("ocr", "ocr", "read", (Status.SCANNED,), Status.READING, (Status.READ,), ENTRY_WAIT_S),
    # Between LLM retries the message waits with `waiting_until` set: the sweep leaves it be.
    Stage("classify", "classify", "classify", (Status.READ,), Status.CLASSIFYING,
          (Status.CLASSIFIED, Status.CLASSIFY_FAILED), ENTRY_WAIT_S, retryable_from=(Status.CLASSIFY_FAILED,)),
    Stage("materialize", "materialize", "classify", (Status.CLASSIFIED,), Status.MATERIALIZING,
          (Status.MATERIALIZED, Status.NOISE), ENTRY_WAIT_S),
    # A message held (paused, no slot) waits with its reason and `waiting_until`; the sweep
    # leaves those be and beat's selection offers materialized ones every minute. From
    # qa_failed it is the next iteration (or, over budget, the escalation).
    # A first launch the approval policy holds goes to awaiting_approval instead.
    Stage("spawn", "spawn", "spawn", (Status.MATERIALIZED, Status.QA_FAILED), Status.SPAWNING,
          (Status.SPAWNED, Status.SPAWN_FAILED, Status.MERGE_FAILED, Status.ESCALATED, Status.AWAITING_APPROVAL),
          120, on_stuck="fail", retryable_from=(Status.SPAWN_FAILED,)),
    # Unclaimed, like qa_route: the request mailed, then the founder's reply (classified as a
    # reply, see synedre/approvals/replies.py) or an operator's command moves it; the sweep
    # offers it again at its expiry, and the stage ends it `refused` with one alert.
    # An OK hands the message back to the gate that asked: spawn (materialized) or deploy (spawned).
    Stage("approval", "poll", "ingest", (Status.AWAITING_APPROVAL,), None,
          (Status.MATERIALIZED, Status.SPAWNED, Status.REFUSED), APPROVAL_EXPIRY_S),
    # A deploy whose ./deploy or infrastructure the agent changed waits for the founder's OK.
    Stage("deploy", "deploy", "after", (Status.SPAWNED,), Status.DEPLOYING,
          (Status.DEPLOYED, Status.QA_FAILED, Status.REPORT_DUE, Status.ORCHESTRATION_FAILED,
           Status.AWAITING_APPROVAL), ENTRY_WAIT_S,
          retryable_from=(Status.ORCHESTRATION_FAILED,)),
    Stage("qa", "qa", "qa", (Status.DEPLOYED,), Status.QA_PLANNING, (Status.QA, Status.QA_FAILED), ENTRY_WAIT_S),
    # One task per route, on any QA worker; each claims one route of the message in
    # PostgreSQL, and the last to finish writes the verdict (no chord, no result backend).
    Stage("qa_route", "qa", "qa", (Status.QA,), None, (Status.QA_PASSED, Status.QA_FAILED), 300),
    Stage("recap", "recap", "after", (Status.QA_PASSED, Status.REPORT_DUE), Status.REPORTING,
          (Status.ACTIONED,), ENTRY_WAIT_S),
)
BY_NAME = {s.name: s for s in STAGES}
# Tasks that are not stages, and their queues (housekeeping on the ingest workers' mostly; an
# operator's resume of a launch on the spawn workers').
HOUSEKEEPING = {"sweep": "poll", "spawn_select": "poll", "lock_watchdog": "poll", "alert": "recap",
                "report_calibration": "recap", "spawn_resume": "spawn", "learn": "recap"}


class WorkerGroup(NamedTuple):
    concurrency: int
    pool: str = "prefork"
    processes: int = 1


# A lean fleet (2 GB server): every group whose work waits on something else (IMAP, clamd,
# Tesseract's process, the LLM, ./deploy, SMTP) runs on threads in one process: a thread
# costs a few MiB where a prefork child costs ~40. Launches stay prefork, one per process
# (the umask of synedre/spawn/workspace.py is process-wide), at most 3 at once per worker
# (and fleet-wide); QA too, its one child keeping one Chromium while checks come (tasks/qa.py).
# Thread pools have no Celery time limit: every external call has its own timeout.
WORKER_GROUPS = {
    "ingest": WorkerGroup(2, "threads"),
    "read": WorkerGroup(2, "threads"),
    "classify": WorkerGroup(12, "threads"),
    "spawn": WorkerGroup(3),
    "after": WorkerGroup(2, "threads"),  # deploy and recap
    "qa": WorkerGroup(1),  # one Chromium; scaled horizontally: `celery -A tasks worker -Q qa` on more machines
}


def queues() -> list[str]:
    return list(dict.fromkeys(s.queue for s in STAGES))


def group_queues(group: str) -> list[str]:
    return list(dict.fromkeys(s.queue for s in STAGES if s.group == group))


def consumer_of(status: Status | str) -> Stage | None:
    """The stage that takes a message on from `status`, if any."""
    return next((s for s in STAGES if status in s.entry), None)


def running_stage(status: Status | str) -> Stage | None:
    return next((s for s in STAGES if s.running == status), None)


def position(status: Status | str) -> int:
    """Index of the stage that produced `status` (for "already past" messages)."""
    for i, s in enumerate(STAGES):
        if status in s.exits or status == s.running:
            return i
    return -1
