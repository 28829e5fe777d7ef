"""The monthly calibration report of the classifier (SPEC §12) and the autonomy gate.

`collect` reads the database once per report; `render` turns the typed result into
markdown and never touches I/O. The autonomy gate (whether the fleet's work is good enough
to go on with less of the founder's say) counts run + plan only (SPEC §14: the original
gate looked for an intent that no longer existed and froze silently); its thresholds are
GATE_MIN_ITEMS and GATE_MIN_SUCCESS below, and the rendered text prints them from there.

Only launched work counts for success (`launched`: a launch row exists and the message is
not waiting for an approval): a request the founder refused (`approval_refused`) or let
expire (`approval_expired`) never launched and is a failure of the gate, counted apart
from the launched work; a message still awaiting approval is neither. Among the launched,
success is the founder's verdict on the recap where he replied one (OK accepted, NON
rejected: `synedre.recap_verdicts`, a NON a failure); else the proxy "linked work not
cancelled, and not failed after its launch": a message whose latest launch failed, or that
ended in a failure after it (`spawn_failed`, `orchestration_failed`, `escalated`, or
`refused` at the deploy's approval), is a failure even though its work row is still open.

`mail_monthly` (beat, the 1st of each month: task `synedre.report_calibration`) mails
the report to the founder through the mail facade, once per month however often it
runs: the facade sends once per (message, kind), so each month's report is stored as
a row of its own in `raw_messages` (mailbox `REPORT_MAILBOX`, which no registry
mailbox uses, no `email_states` row: no stage, report or listing ever sees it) and
mailed as kind `REPORT_KIND` about that row.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from synedre.pipeline import ALERTED, ApprovalStatus, LaunchStatus, Status

GATE_MIN_ITEMS = 30
GATE_MIN_SUCCESS = 0.90  # the success rate must be strictly above this

# Table order of the report: work-producing intents first, noise last.
INTENTS = ("run", "question", "negociation", "conseil", "noise")
# Noise materializes nothing, so it has no success proxy.
NO_LINKED_WORK = frozenset({"noise"})
FAILURE_EVENTS = (str(Status.CLASSIFY_FAILED), "classify_blocked_unsafe_attachments")
# Statuses that end a message in failure after its launch (the founder was alerted).
FAILED_AFTER_LAUNCH = tuple(sorted(str(s) for s in ALERTED))


@dataclass(frozen=True)
class IntentStats:
    intent: str
    count: int
    mean_confidence: float | None  # None when no message has a confidence
    std_confidence: float | None  # population standard deviation
    successes: int | None  # of the launched; None for an intent without linked work (noise)
    uncertain: int
    launched: int = 0

    @property
    def success_rate(self) -> float | None:
        """Of the launched work only (see the module's docstring)."""
        if self.successes is None or self.launched == 0:
            return None
        return self.successes / self.launched

    @property
    def uncertainty_rate(self) -> float | None:
        return self.uncertain / self.count if self.count else None


@dataclass(frozen=True)
class Failures:
    by_event: dict[str, int]  # every event of FAILURE_EVENTS, in that order

    @property
    def total(self) -> int:
        return sum(self.by_event.values())


@dataclass(frozen=True)
class Gate:
    """The autonomy gate, counted on messages classified run + plan: its success figure is
    `successes` of the `items` launched; its failures apart from them are the founder's
    refusals and the requests that expired; the messages still waiting are neither."""

    items: int  # launched
    successes: int
    rejected: int = 0  # of the launched, the founder's NON on the recap
    refused: int = 0  # approval refused: never launched
    expired: int = 0  # approval expired: never launched
    waiting: int = 0  # awaiting approval: not counted

    @property
    def failures(self) -> int:
        """Every failure of the gate: the launched that did not succeed, refusals, expiries."""
        return self.items - self.successes + self.refused + self.expired

    @property
    def rate(self) -> float | None:
        return self.successes / self.items if self.items else None

    @property
    def is_open(self) -> bool:
        return gate_open(self.items, self.successes)


@dataclass(frozen=True)
class CalibrationData:
    days: int
    since: datetime
    until: datetime
    intents: tuple[IntentStats, ...]  # one per INTENTS, in that order
    failures: Failures
    gate: Gate


def gate_open(items: int, successes: int) -> bool:
    """At least GATE_MIN_ITEMS items and a success rate strictly above GATE_MIN_SUCCESS.

    Compared as exact fractions: 27/30 must not pass a "> 0.9" test by a float rounding.
    """
    if items < GATE_MIN_ITEMS:
        return False
    return Fraction(successes, items) > Fraction(str(GATE_MIN_SUCCESS))


# The report's population: messages received in the window that were classified
# (they carry a `classified` audit), with their final intent from the state row.
# The success proxy looks at the work linked for that intent only; `status` is
# NOT NULL on every work table, so a NULL work_status means "no linked work"; a launch
# that failed (the latest one, or a failure status after it) is never a success.
# real is cast to numeric so that means and deviations are exact decimals.
_CLASSIFIED = """
WITH classified AS (
  SELECT s.message_id, s.intent, s.complexity, s.confidence::numeric AS confidence,
         CASE s.intent WHEN 'run' THEN r.status
                       WHEN 'question' THEN q.status
                       WHEN 'negociation' THEN n.status
                       WHEN 'conseil' THEN a.status END AS work_status,
         EXISTS (SELECT 1 FROM synedre.audit_log u
                  WHERE u.message_id = s.message_id
                    AND u.event = 'classification_uncertain') AS uncertain,
         (SELECT v.verdict FROM synedre.recap_verdicts v WHERE v.message_id = s.message_id) AS verdict,
         (s.status = ANY(%(failed_after_launch)s)
          OR coalesce((SELECT l.status FROM synedre.launches l WHERE l.message_id = s.message_id
                        ORDER BY l.id DESC LIMIT 1) = %(launch_failed)s, false)) AS launch_failed,
         (s.status = %(waiting)s) AS waiting,
         (s.status <> %(waiting)s
          AND EXISTS (SELECT 1 FROM synedre.launches l WHERE l.message_id = s.message_id)) AS launched,
         CASE WHEN s.status = %(refused)s THEN
           (SELECT a.status FROM synedre.approvals a WHERE a.message_id = s.message_id
             ORDER BY a.id DESC LIMIT 1) END AS closed_by
    FROM synedre.email_states s
    JOIN synedre.raw_messages m ON m.id = s.message_id
    LEFT JOIN synedre.runs r ON r.id = s.run_id
    LEFT JOIN synedre.questions q ON q.id = s.question_id
    LEFT JOIN synedre.negotiations n ON n.id = s.negotiation_id
    LEFT JOIN synedre.advices a ON a.id = s.advice_id
   WHERE m.received_at >= %(since)s AND m.received_at <= %(until)s
     AND s.intent IS NOT NULL
     AND EXISTS (SELECT 1 FROM synedre.audit_log c
                  WHERE c.message_id = s.message_id AND c.event = 'classified')
)
"""

# Launched work only: the founder's verdict on the recap, where he gave one, is the
# success; else the proxy (a message refused after its launch, at the deploy's approval, is
# not one).
_SUCCESS = ("launched AND coalesce(verdict = 'accepted', work_status IS NOT NULL AND work_status <> 'cancelled'"
            " AND NOT launch_failed AND closed_by IS NULL)")

_PER_INTENT = _CLASSIFIED + f"""
SELECT intent, count(*), avg(confidence), stddev_pop(confidence),
       count(*) FILTER (WHERE launched),
       count(*) FILTER (WHERE {_SUCCESS}),
       count(*) FILTER (WHERE uncertain)
  FROM classified
 GROUP BY intent
"""

_GATE = _CLASSIFIED + f"""
SELECT count(*) FILTER (WHERE launched),
       count(*) FILTER (WHERE {_SUCCESS}),
       count(*) FILTER (WHERE launched AND verdict = 'rejected'),
       count(*) FILTER (WHERE NOT launched AND closed_by = %(approval_refused)s),
       count(*) FILTER (WHERE NOT launched AND closed_by = %(approval_expired)s),
       count(*) FILTER (WHERE waiting)
  FROM classified
 WHERE intent = 'run' AND complexity = 'plan'
"""

# Failures of messages received in the window, the same population bound as above.
_FAILURES = """
SELECT a.event, count(*)
  FROM synedre.audit_log a
  JOIN synedre.raw_messages m ON m.id = a.message_id
 WHERE a.event = ANY(%(events)s)
   AND m.received_at >= %(since)s AND m.received_at <= %(until)s
 GROUP BY a.event
"""


def _float(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def collect(conn: psycopg.Connection[Any], days: int = 30,
            now: datetime | None = None) -> CalibrationData:
    """Aggregate the messages received in the `days` days up to `now` (default: now, UTC).

    A naive `now` is taken as UTC. Runs in the caller's connection and transaction.
    """
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    until = now or datetime.now(UTC)
    if until.tzinfo is None:
        until = until.replace(tzinfo=UTC)
    since = until - timedelta(days=days)
    window = {"since": since, "until": until, "failed_after_launch": list(FAILED_AFTER_LAUNCH),
              "launch_failed": str(LaunchStatus.FAILED), "waiting": str(Status.AWAITING_APPROVAL),
              "refused": str(Status.REFUSED), "approval_refused": str(ApprovalStatus.REFUSED),
              "approval_expired": str(ApprovalStatus.EXPIRED)}

    with conn.cursor(row_factory=tuple_row) as cur:
        rows = {r[0]: r for r in cur.execute(_PER_INTENT, window).fetchall()}
        gate_row = cur.execute(_GATE, window).fetchone()
        assert gate_row is not None  # an aggregate without GROUP BY returns exactly one row
        gate = Gate(*gate_row)
        failed: dict[str, int] = dict(cur.execute(_FAILURES, {**window, "events": list(FAILURE_EVENTS)})
                                      .fetchall())

    intents = []
    for intent in INTENTS:
        _, count, mean, std, launched, successes, uncertain = rows.get(intent, (intent, 0, None, None, 0, 0, 0))
        intents.append(IntentStats(
            intent=intent, count=count, mean_confidence=_float(mean),
            std_confidence=_float(std),
            successes=None if intent in NO_LINKED_WORK else successes,
            uncertain=uncertain, launched=launched))
    return CalibrationData(
        days=days, since=since, until=until, intents=tuple(intents),
        failures=Failures(by_event={e: failed.get(e, 0) for e in FAILURE_EVENTS}),
        gate=gate)


# Rendering -------------------------------------------------------------------------

def _pct(part: int, whole: int, rate: float | None) -> str:
    return "—" if rate is None else f"{rate:.1%} ({part}/{whole})"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _gate_lines(gate: Gate) -> list[str]:
    rule = f"requires ≥ {GATE_MIN_ITEMS} launched and > {GATE_MIN_SUCCESS:.1%} success"
    rate = "none launched" if gate.rate is None else f"{gate.rate:.1%}"
    state = "open" if gate.is_open else "closed"
    line = (f"**Autonomy gate: {state}** — run + plan: {gate.successes}/{gate.items} "
            f"launched succeeded ({rate}); {rule}.")
    if not gate.is_open:
        if gate.items < GATE_MIN_ITEMS:
            line += f" Too few launched ({gate.items} < {GATE_MIN_ITEMS})."
        else:
            line += f" Success rate not above {GATE_MIN_SUCCESS:.1%}."
    return [line, "",
            f"Failures of the gate: {gate.failures} — among the launched, {gate.rejected} NON on the recap"
            f" and {gate.items - gate.successes - gate.rejected} failed otherwise; never launched:"
            f" {gate.refused} approval refused, {gate.expired} approval expired.",
            f"Still awaiting approval (not counted): {gate.waiting}."]


def render(data: CalibrationData) -> str:
    """The report as markdown, deterministic for given data."""
    fmt = "%Y-%m-%d %H:%M UTC"
    since = data.since.astimezone(UTC).strftime(fmt)
    until = data.until.astimezone(UTC).strftime(fmt)
    lines = [
        f"# Classification calibration — last {data.days} days ({since} → {until})",
        "",
        "| intent | count | mean conf | std | success (of launched) | uncertainty rate |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in data.intents:
        success = ("n/a" if s.successes is None
                   else _pct(s.successes, s.launched, s.success_rate))
        lines.append(
            f"| {s.intent} | {s.count} | {_num(s.mean_confidence)} | {_num(s.std_confidence)} "
            f"| {success} | {_pct(s.uncertain, s.count, s.uncertainty_rate)} |")
    lines += ["", "## Failures", "", f"Total: {data.failures.total}", ""]
    lines += [f"- `{event}`: {n}" for event, n in data.failures.by_event.items()]
    lines += ["", "## Autonomy gate", "", *_gate_lines(data.gate), ""]
    return "\n".join(lines)


def as_dict(data: CalibrationData) -> dict[str, Any]:
    """The report's figures for `--json`, the derived ones (rates, the gate's state) included."""
    gate = data.gate
    return {
        "days": data.days, "since": data.since.isoformat(), "until": data.until.isoformat(),
        "intents": [{**asdict(s), "success_rate": s.success_rate, "uncertainty_rate": s.uncertainty_rate}
                    for s in data.intents],
        "failures": {"total": data.failures.total, "by_event": data.failures.by_event},
        "autonomy_gate": {**asdict(gate), "rate": gate.rate, "failures": gate.failures, "open": gate.is_open,
                          "min_items": GATE_MIN_ITEMS, "min_success": GATE_MIN_SUCCESS},
    }


# The monthly mail ------------------------------------------------------------------

REPORT_KIND = "calibration-report"
REPORT_MAILBOX = "synedre-reports"  # raw_messages.mailbox of the reports' own rows
REPORT_SUBJECT = "Calibration du classifieur — {period}"


def period_of(now: datetime) -> str:
    """The month a report run belongs to (UTC): at most one report is mailed per period."""
    return (now if now.tzinfo else now.replace(tzinfo=UTC)).astimezone(UTC).strftime("%Y-%m")


def report_row(conn: Any, period: str, text: str) -> int:
    """The report's own `raw_messages` row for `period`, created by the first run of the
    month (it keeps that run's text); later runs find it."""
    year, month = (int(x) for x in period.split("-"))
    subject = REPORT_SUBJECT.format(period=period)
    raw = f"Subject: {subject}\r\n\r\n{text}".encode()
    rfc = f"<calibration-{period}@synedre.invalid>"
    row = conn.execute(
        """INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, message_id_synthetic,
                                             subject, raw, size)
           VALUES (%s, 0, %s, %s, true, %s, %s, %s)
           ON CONFLICT (mailbox, message_id) DO NOTHING RETURNING id""",
        (REPORT_MAILBOX, year * 100 + month, rfc, subject, raw, len(raw))).fetchone()
    if row is None:
        row = conn.execute("SELECT id FROM synedre.raw_messages WHERE mailbox = %s AND message_id = %s",
                           (REPORT_MAILBOX, rfc)).fetchone()
    return int(row["id"] if isinstance(row, dict) else row[0])


def sender_mailbox() -> str:
    """The registry mailbox the report leaves from: `atlas` when it can send, else the
    first one that has an SMTP host."""
    from synedre import mailboxes

    boxes = mailboxes.load()
    senders = [b for b in boxes.values() if b.smtp_host]
    if not senders:
        raise mailboxes.RegistryError("no mailbox of the registry has an smtp_host: the report cannot be mailed")
    return next((b.id for b in senders if b.id == "atlas"), senders[0].id)


def mail_monthly(days: int = 30, now: datetime | None = None, mailbox_id: str | None = None) -> Any:
    """Mail this month's report to the founder, exactly once per month (see the module's
    docstring); returns the facade's `SendResult` (`already_sent` on a second run)."""
    from synedre import db
    from synedre.mail import outbound, templating

    now = now or datetime.now(UTC)
    period = period_of(now)
    with db.transaction() as conn:
        text = render(collect(conn, days=days, now=now))
        mid = report_row(conn, period, text)
        # the text the month's first run stored: a retry mails that one, not a newer render
        stored = conn.execute("SELECT raw FROM synedre.raw_messages WHERE id = %s", (mid,)).fetchone()
        assert stored is not None  # report_row just found or created it
    mail = templating.mail("calibration", {"report": bytes(stored["raw"]).decode().split("\r\n\r\n", 1)[1]})
    return outbound.send_to_founder(db.transaction, mailbox_id or sender_mailbox(), mid, REPORT_KIND,
                                    subject=REPORT_SUBJECT.format(period=period), text=mail.text, html=mail.html)
