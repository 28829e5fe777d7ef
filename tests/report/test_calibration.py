"""Calibration report: per-intent statistics, failures and the autonomy gate (SPEC §12, §14)."""
from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from synedre.report import calibration
from synedre.report.calibration import (
    GATE_MIN_ITEMS,
    GATE_MIN_SUCCESS,
    CalibrationData,
    Failures,
    Gate,
    IntentStats,
    collect,
    render,
)
from tests.mail.fixtures import FOUNDER, insert_founder, use_atlas_mailbox
from tests.services import approvals

NOW = datetime(2025, 6, 30, 12, 0, tzinfo=UTC)
RECENT = timedelta(days=2)

WORK_TABLE = {"run": "runs", "question": "questions", "negociation": "negotiations",
              "conseil": "advices"}
WORK_LINK = {"run": "run_id", "question": "question_id", "negociation": "negotiation_id",
             "conseil": "advice_id"}


class Inbox:
    """Writes messages as the pipeline would leave them: raw row, state, linked work, audits."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self.uid = 0

    def _raw(self, age: timedelta) -> tuple[int, datetime]:
        self.uid += 1
        received = NOW - age
        raw = (f"From: client{self.uid}@example.org\r\nSubject: demande {self.uid}\r\n"
               "\r\nBonjour").encode()
        mid = self.conn.execute(
            """INSERT INTO synedre.raw_messages
                 (mailbox, uidvalidity, uid, message_id, envelope_from, subject, raw, size,
                  dkim_pass, received_at)
               VALUES ('atlas', 1, %s, %s, %s, %s, %s, %s, true, %s) RETURNING id""",
            (self.uid, f"<m{self.uid}@example.org>", f"client{self.uid}@example.org",
             f"demande {self.uid}", raw, len(raw), received)).fetchone()[0]
        return mid, received

    def audit(self, mid: int, event: str, at: datetime, **detail) -> None:
        self.conn.execute("INSERT INTO synedre.audit_log (message_id, event, detail, at)"
                          " VALUES (%s, %s, %s, %s)", (mid, event, Jsonb(detail), at))

    def classified(self, intent: str, confidence: float, *, complexity: str = "leger",
                   work: str | None = "open", age: timedelta = RECENT,
                   audited_intent: str | None = None, launch: str | None = "succeeded") -> int:
        """A classified message; `work` is the status of its linked work, None for no link;
        linked work was launched once, ending `launch` (None: no launch row)."""
        mid, received = self._raw(age)
        link = None
        if work is not None and intent in WORK_TABLE:
            table = WORK_TABLE[intent]
            if intent == "run":
                link = self.conn.execute(
                    "INSERT INTO synedre.runs (ref_type, ref_id, title, complexity, status)"
                    " VALUES ('atlas-inbox', %s, %s, %s, %s) RETURNING id",
                    (str(mid), f"run {mid}", complexity, work)).fetchone()[0]
            elif intent == "question":
                link = self.conn.execute(
                    "INSERT INTO synedre.questions (ref_type, ref_id, title, status)"
                    " VALUES ('atlas-inbox', %s, %s, %s) RETURNING id",
                    (str(mid), f"question {mid}", work)).fetchone()[0]
            else:
                link = self.conn.execute(
                    f"INSERT INTO synedre.{table} (raw_message_id, title, status)"
                    " VALUES (%s, %s, %s) RETURNING id", (mid, f"{intent} {mid}", work)
                ).fetchone()[0]
        state_complexity = complexity if intent == "run" else "leger"
        status = "noise" if intent == "noise" else ("actioned" if link else "classified")
        columns = "message_id, status, intent, complexity, confidence, model"
        values = [mid, status, intent, state_complexity, confidence, "mistral-small-latest"]
        if link is not None:
            columns += f", {WORK_LINK[intent]}"
            values.append(link)
        self.conn.execute(
            f"INSERT INTO synedre.email_states ({columns})"
            f" VALUES ({', '.join(['%s'] * len(values))})", values)
        at = received + timedelta(minutes=1)
        if confidence < 0.7:
            self.audit(mid, "classification_uncertain", at, confidence=confidence)
        self.audit(mid, "classified", at, intent=audited_intent or intent,
                   complexity=state_complexity, confidence=confidence)
        if link is not None and launch is not None:
            _launch(self.conn, mid, 1, launch)
        return mid

    def unclassified(self, status: str = "scanned", age: timedelta = RECENT) -> int:
        mid, _ = self._raw(age)
        self.conn.execute("INSERT INTO synedre.email_states (message_id, status) VALUES (%s, %s)",
                          (mid, status))
        return mid

    def failed(self, event: str, age: timedelta = RECENT) -> int:
        status = {"classify_failed": "classify_failed",
                  "classify_blocked_unsafe_attachments": "blocked_unsafe_attachment"}[event]
        mid = self.unclassified(status, age)
        self.audit(mid, event, NOW - age + timedelta(minutes=1), reason="test")
        return mid

    def run_plan(self, items: int, successes: int, age: timedelta = RECENT) -> None:
        """`items` run+plan messages launched, of which `successes` have a live run; the
        others alternate between a cancelled run and a failed launch."""
        for i in range(items):
            work = "open" if i < successes or i % 2 == 0 else "cancelled"
            launch = "succeeded" if i < successes or i % 2 else "failed"
            self.classified("run", 0.85, complexity="plan", work=work, age=age, launch=launch)


@pytest.fixture
def inbox(db):
    with psycopg.connect(db, autocommit=True) as conn:
        yield Inbox(conn)


def by_intent(data: CalibrationData) -> dict[str, IntentStats]:
    return {s.intent: s for s in data.intents}


@pytest.mark.timeout(60)
def test_per_intent_counts_confidence_success_proxy_and_uncertainty(inbox):
    inbox.classified("run", 0.9, work="open")
    inbox.classified("run", 0.7, work="cancelled")
    inbox.classified("run", 0.5, work=None)  # not materialized yet
    inbox.classified("question", 0.8, work="answered")
    inbox.classified("question", 0.6, work="cancelled")
    inbox.classified("negociation", 0.95, work="open")
    inbox.classified("noise", 0.4, audited_intent="noise")
    inbox.classified("noise", 0.99)
    inbox.unclassified()  # never classified: not in the report

    data = collect(inbox.conn, now=NOW)
    stats = by_intent(data)

    assert [s.intent for s in data.intents] == ["run", "question", "negociation", "conseil",
                                                "noise"]
    run = stats["run"]
    assert (run.count, run.launched, run.successes, run.uncertain) == (3, 2, 1, 1)
    assert run.mean_confidence == pytest.approx(statistics.mean([0.9, 0.7, 0.5]), abs=1e-9)
    assert run.std_confidence == pytest.approx(statistics.pstdev([0.9, 0.7, 0.5]), abs=1e-9)
    assert run.success_rate == pytest.approx(1 / 2)  # of the launched: the one not materialized is not
    assert run.uncertainty_rate == pytest.approx(1 / 3)

    question = stats["question"]
    assert (question.count, question.successes, question.uncertain) == (2, 1, 1)
    assert question.mean_confidence == pytest.approx(0.7, abs=1e-9)
    assert question.std_confidence == pytest.approx(0.1, abs=1e-9)

    nego = stats["negociation"]
    assert (nego.count, nego.successes, nego.uncertain) == (1, 1, 0)
    assert nego.mean_confidence == pytest.approx(0.95, abs=1e-9)
    assert nego.std_confidence == 0
    assert nego.success_rate == 1.0

    conseil = stats["conseil"]
    assert (conseil.count, conseil.mean_confidence, conseil.std_confidence) == (0, None, None)
    assert conseil.success_rate is None and conseil.uncertainty_rate is None

    noise = stats["noise"]
    assert (noise.count, noise.successes, noise.uncertain) == (2, None, 1)
    assert noise.success_rate is None  # n/a: noise links no work
    assert noise.mean_confidence == pytest.approx(0.695, abs=1e-9)
    assert noise.std_confidence == pytest.approx(0.295, abs=1e-9)


@pytest.mark.timeout(60)
def test_a_message_overridden_after_classification_counts_under_its_final_intent_once(inbox):
    # Rule 8: a negociation from an existing client became run/plan; a later
    # re-classification wrote a second `classified` audit.
    mid = inbox.classified("run", 0.8, complexity="plan", audited_intent="negociation")
    inbox.audit(mid, "classified", NOW - timedelta(hours=1), intent="run", complexity="plan",
                confidence=0.8)

    stats = by_intent(collect(inbox.conn, now=NOW))

    assert stats["run"].count == 1 and stats["negociation"].count == 0


@pytest.mark.timeout(60)
def test_messages_outside_the_window_are_excluded(inbox):
    inbox.classified("run", 0.9, age=timedelta(days=29))
    inbox.classified("run", 0.9, age=timedelta(days=31))
    inbox.classified("run", 0.9, age=timedelta(days=-1))  # after `now`
    inbox.classified("question", 0.8, age=timedelta(days=6))
    inbox.classified("question", 0.8, age=timedelta(days=8))

    month = by_intent(collect(inbox.conn, now=NOW))
    week = collect(inbox.conn, days=7, now=NOW)

    assert (month["run"].count, month["question"].count) == (1, 2)
    assert (by_intent(week)["run"].count, by_intent(week)["question"].count) == (0, 1)
    assert (week.since, week.until) == (NOW - timedelta(days=7), NOW)


@pytest.mark.timeout(60)
def test_failures_are_counted_per_event_within_the_window(inbox):
    inbox.failed("classify_failed")
    inbox.failed("classify_failed")
    inbox.failed("classify_blocked_unsafe_attachments")
    inbox.failed("classify_failed", age=timedelta(days=40))
    inbox.classified("run", 0.9)

    data = collect(inbox.conn, now=NOW)

    assert data.failures.by_event == {"classify_failed": 2,
                                      "classify_blocked_unsafe_attachments": 1}
    assert data.failures.total == 3
    assert sum(s.count for s in data.intents) == 1  # failed messages were never classified


@pytest.mark.timeout(60)
@pytest.mark.parametrize("items, successes, is_open", [
    (31, 29, True),   # 29/31 = 0.935
    (30, 27, False),  # 0.9 is not > 0.9
    (29, 29, False),  # too few items
    (30, 28, True),   # 0.933 on exactly the minimum
])
def test_the_autonomy_gate_needs_enough_run_plan_items_and_a_success_rate_above_the_floor(
        inbox, items, successes, is_open):
    inbox.run_plan(items, successes)

    gate = collect(inbox.conn, now=NOW).gate

    assert (gate.items, gate.successes, gate.is_open) == (items, successes, is_open)
    assert gate.rate == pytest.approx(successes / items)


@pytest.mark.timeout(60)
def test_the_autonomy_gate_ignores_run_leger_other_intents_and_old_messages(inbox):
    inbox.run_plan(29, 29)
    for _ in range(5):
        inbox.classified("run", 0.9, complexity="leger", work="open")
    inbox.classified("negociation", 0.9, work="open")
    inbox.classified("question", 0.9, work="open")
    inbox.run_plan(3, 3, age=timedelta(days=45))

    data = collect(inbox.conn, now=NOW)

    assert (data.gate.items, data.gate.successes, data.gate.is_open) == (29, 29, False)
    assert by_intent(data)["run"].count == 34  # run+leger does count in the table


@pytest.mark.timeout(60)
def test_render_shows_the_table_failures_and_the_gate_with_the_collected_numbers(inbox):
    inbox.run_plan(31, 29)
    inbox.classified("noise", 0.4)
    inbox.classified("noise", 0.6)
    inbox.failed("classify_blocked_unsafe_attachments")

    text = render(collect(inbox.conn, now=NOW))

    assert text.startswith("# Classification calibration — last 30 days "
                           "(2025-05-31 12:00 UTC → 2025-06-30 12:00 UTC)")
    assert "| run | 31 | 0.850 | 0.000 | 93.5% (29/31) | 0.0% (0/31) |" in text
    assert "success (of launched)" in text and "Phase 3" not in text
    assert "| noise | 2 | 0.500 | 0.100 | n/a | 100.0% (2/2) |" in text
    assert "| conseil | 0 | — | — | — | — |" in text
    rows = [line.split("|")[1].strip() for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| intent")]
    assert rows == ["run", "question", "negociation", "conseil", "noise"]
    assert "Total: 1" in text
    assert "- `classify_blocked_unsafe_attachments`: 1" in text
    assert "- `classify_failed`: 0" in text
    assert ("**Autonomy gate: open** — run + plan: 29/31 launched succeeded (93.5%); "
            f"requires ≥ {GATE_MIN_ITEMS} launched and > {GATE_MIN_SUCCESS:.1%} success.") in text


def _data(gate: Gate) -> CalibrationData:
    return CalibrationData(
        days=30, since=NOW - timedelta(days=30), until=NOW,
        intents=tuple(IntentStats(i, 0, None, None, None if i == "noise" else 0, 0)
                      for i in calibration.INTENTS),
        failures=Failures({e: 0 for e in calibration.FAILURE_EVENTS}), gate=gate)


@pytest.mark.timeout(60)
def test_render_explains_why_the_gate_is_closed():
    assert "Too few launched (29 < 30)." in render(_data(Gate(items=29, successes=29)))
    closed = render(_data(Gate(items=30, successes=27)))
    assert "**Autonomy gate: closed** — run + plan: 27/30 launched succeeded (90.0%)" in closed
    assert "Success rate not above 90.0%." in closed
    assert "none launched" in render(_data(Gate(items=0, successes=0)))


@pytest.mark.timeout(60)
def test_gate_and_its_text_follow_the_constants(monkeypatch):
    monkeypatch.setattr(calibration, "GATE_MIN_ITEMS", 40)
    monkeypatch.setattr(calibration, "GATE_MIN_SUCCESS", 0.95)

    text = render(_data(Gate(items=31, successes=30)))

    assert "**Autonomy gate: closed**" in text
    assert "requires ≥ 40 launched and > 95.0% success." in text
    assert "Too few launched (31 < 40)." in text


@pytest.mark.timeout(60)
def test_days_must_be_positive(inbox):
    with pytest.raises(ValueError):
        collect(inbox.conn, days=0, now=NOW)


@pytest.mark.timeout(60)
def test_collect_works_on_a_pool_style_dict_row_connection(db, inbox):
    from psycopg.rows import dict_row

    inbox.run_plan(2, 1)
    with psycopg.connect(db, row_factory=dict_row) as conn:
        gate = collect(conn, now=NOW).gate
    assert (gate.items, gate.successes) == (2, 1)


# -- a launch that failed is not a success -----------------------------------------------

def _launch(conn, mid: int, attempt: int, status: str) -> None:
    conn.execute("INSERT INTO synedre.launches (message_id, attempt, status) VALUES (%s, %s, %s)",
                 (mid, attempt, status))


@pytest.mark.timeout(60)
def test_a_launch_that_failed_counts_as_a_failure_of_the_success_proxy(inbox):
    failed = inbox.classified("question", 0.9, work="open", launch="failed")
    inbox.conn.execute("UPDATE synedre.email_states SET status = 'spawn_failed' WHERE message_id = %s", (failed,))
    retried = inbox.classified("question", 0.9, work="open", launch="failed")  # failed once, then succeeded
    _launch(inbox.conn, retried, 2, "succeeded")
    escalated = inbox.classified("run", 0.9, complexity="plan", work="open")
    inbox.conn.execute("UPDATE synedre.email_states SET status = 'escalated' WHERE message_id = %s",
                       (escalated,))
    inbox.classified("run", 0.9, complexity="plan", work="open")

    data = collect(inbox.conn, now=NOW)
    stats = by_intent(data)

    assert (stats["question"].count, stats["question"].successes) == (2, 1)
    assert (stats["run"].count, stats["run"].successes) == (2, 1)
    assert (data.gate.items, data.gate.successes) == (2, 1)
    assert "| question | 2 | 0.900 | 0.000 | 50.0% (1/2) |" in render(data)


@pytest.mark.timeout(60)
def test_a_question_whose_only_launch_failed_is_not_a_success(inbox):
    mid = inbox.classified("question", 0.8, work="open", launch="failed")
    inbox.conn.execute("UPDATE synedre.email_states SET status = 'spawn_failed' WHERE message_id = %s", (mid,))

    text = render(collect(inbox.conn, now=NOW))

    assert "| question | 1 | 0.800 | 0.000 | 0.0% (0/1) |" in text
    assert "100.0% (1/1)" not in text


# -- only launched work counts; refusals and expiries are the gate's failures, apart -----

def _held(inbox: Inbox, conn, tmp_path, age: timedelta) -> int:
    """A run + plan message the approval policy held (its request opened as the spawn stage opens it)."""
    from synedre.config import Settings

    mid = inbox.classified("run", 0.9, complexity="plan", work="open", age=age, launch=None)
    conn.execute("UPDATE synedre.email_states SET status = 'materialized' WHERE message_id = %s", (mid,))
    policy = tmp_path / "policy.toml"
    policy.write_text("[run_plan]\nenabled = true\n")
    state = conn.execute("SELECT s.*, NULL::text AS client_codename FROM synedre.email_states s"
                         " WHERE s.message_id = %s", (mid,)).fetchone()
    with conn.transaction():
        asked = approvals.gate(conn, state, "plan", "claude-sonnet", Settings(state_dir=tmp_path,
                                                                               approval_policy_file=policy))
    assert asked.status == "awaiting_approval", asked
    return mid


def _acceptance_six(inbox: Inbox, db, tmp_path, age: timedelta = RECENT) -> None:
    """4 launched (3 OK, 1 NON on the recap), 3 refused, 2 expired, 1 waiting: through the
    product's own decisions (`asks`, `decide`, `expired`, `record_verdict`)."""
    from psycopg.rows import dict_row

    from synedre.approvals import decisions

    with psycopg.connect(db, row_factory=dict_row, autocommit=True) as conn:
        for n, verdict in enumerate(("ok", "ok", "ok", "non")):
            mid = inbox.classified("run", 0.9, complexity="plan", work="open", age=age)
            with conn.transaction():
                assert decisions.record_verdict(conn, mid, verdict, None, f"<verdict{n}@x>")
        for _ in range(3):
            mid = _held(inbox, conn, tmp_path, age)
            with conn.transaction():
                assert decisions.decide(conn, mid, approve=False, by="julien@atelier-moreau.fr") is None
        for _ in range(2):
            mid = _held(inbox, conn, tmp_path, age)
            conn.execute("UPDATE synedre.approvals SET expires_at = now() - interval '1 second'"
                         " WHERE message_id = %s", (mid,))
            with conn.transaction():
                assert approvals.expire(conn, mid)
        _held(inbox, conn, tmp_path, age)
        statuses = conn.execute("SELECT status, count(*) AS n FROM synedre.email_states GROUP BY status"
                                " ORDER BY status").fetchall()
    assert [(r["status"], r["n"]) for r in statuses] == [("actioned", 4), ("awaiting_approval", 1),
                                                         ("refused", 5)]


@pytest.mark.timeout(60)
def test_the_gate_counts_only_launched_work_and_refusals_and_expiries_apart(inbox, db, tmp_path):
    _acceptance_six(inbox, db, tmp_path)

    data = collect(inbox.conn, now=NOW)
    gate, run = data.gate, by_intent(data)["run"]

    # 3 of the 4 launched: the NON is a failure, the refused, expired and waiting are not launched work
    assert (gate.items, gate.successes, gate.rate) == (4, 3, 0.75)
    assert (gate.rejected, gate.refused, gate.expired, gate.waiting) == (1, 3, 2, 1)
    assert gate.failures == 1 + 3 + 2 and not gate.is_open
    assert (run.count, run.launched, run.successes) == (10, 4, 3)
    text = render(data)
    assert "**Autonomy gate: closed** — run + plan: 3/4 launched succeeded (75.0%)" in text
    assert ("Failures of the gate: 6 — among the launched, 1 NON on the recap and 0 failed otherwise;"
            " never launched: 3 approval refused, 2 approval expired.") in text
    assert "Still awaiting approval (not counted): 1." in text
    assert "| run | 10 | 0.900 | 0.000 | 75.0% (3/4) |" in text
    assert "Phase 3" not in text and "10/10" not in text


@pytest.mark.timeout(60)
def test_the_cli_prints_the_gate_and_its_json(inbox, db, tmp_path):
    import json

    from typer.testing import CliRunner

    from synedre.cli import app

    _acceptance_six(inbox, db, tmp_path, age=-(datetime.now(UTC) - NOW) + RECENT)

    shown = CliRunner().invoke(app, ["report", "calibration"])
    as_json = CliRunner().invoke(app, ["report", "calibration", "--json"])

    assert shown.exit_code == 0, shown.output
    assert "## Autonomy gate" in shown.output and "3/4 launched succeeded (75.0%)" in shown.output
    assert "3 approval refused, 2 approval expired" in shown.output and "Phase 3" not in shown.output
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.output)
    gate = report["autonomy_gate"]
    assert {k: gate[k] for k in ("items", "successes", "rate", "rejected", "refused", "expired", "waiting",
                                 "failures", "open")} == {
        "items": 4, "successes": 3, "rate": 0.75, "rejected": 1, "refused": 3, "expired": 2, "waiting": 1,
        "failures": 6, "open": False}
    run = next(i for i in report["intents"] if i["intent"] == "run")
    assert (run["count"], run["launched"], run["successes"], run["success_rate"]) == (10, 4, 3, 0.75)


# -- monthly, on beat, mailed to the founder ---------------------------------------------

def test_the_report_is_scheduled_on_the_first_of_each_month_on_the_recap_queue():
    from celery.schedules import crontab

    import beat_schedule
    from synedre import celeryconfig
    from tasks.app import app

    entry = beat_schedule.schedule()["calibration-report"]
    assert entry["task"] == "synedre.report_calibration"
    assert entry["schedule"] == crontab(minute=0, hour=6, day_of_month=1)
    assert celeryconfig.task_routes["synedre.report_calibration"] == {"queue": "recap"}
    app.loader.import_default_modules()
    assert "synedre.report_calibration" in app.tasks


@pytest.fixture
def mailed(db, dovecot, tmp_path, monkeypatch):
    """A founder, and the registry's atlas mailbox on Dovecot with its SMTP on aiosmtpd."""
    from tests.services.smtp import start_smtp

    sink = start_smtp()
    use_atlas_mailbox(tmp_path, dovecot, sink, monkeypatch)
    with psycopg.connect(db) as conn:
        insert_founder(conn, [FOUNDER])
    yield sink
    sink.stop()


@pytest.mark.timeout(120)
def test_the_monthly_task_mails_one_report_and_a_second_run_that_month_sends_nothing(db, mailed):
    from synedre.report.calibration import REPORT_KIND, mail_monthly, period_of
    from tasks.report import report_calibration

    with psycopg.connect(db, autocommit=True) as conn:
        Inbox(conn).classified("question", 0.8, work="open", age=-(datetime.now(UTC) - NOW) + RECENT)

    assert report_calibration() == "sent"
    assert len(mailed.received) == 1
    got = mailed.received[0]
    assert got.rcpt_tos == (FOUNDER,)
    msg = got.message
    period = period_of(datetime.now(UTC))
    assert msg["Subject"] == f"[Atlas] Calibration du classifieur — {period}"
    body = msg.get_body(("plain",)).get_content()
    assert body.startswith("# Classification calibration — last 30 days")
    assert "| question | 1 | 0.800 | 0.000 | 100.0% (1/1) |" in body

    assert report_calibration() == "already_sent"  # again the same month: nothing more
    assert len(mailed.received) == 1
    rows = q_all(db, "SELECT o.kind, o.status, r.mailbox, r.subject FROM synedre.outbound_mail o"
                     " JOIN synedre.raw_messages r ON r.id = o.message_id")
    assert rows == [(REPORT_KIND, "sent", "synedre-reports", f"Calibration du classifieur — {period}")]
    # the report's own row is no message of the pipeline
    assert q_all(db, "SELECT count(*) FROM synedre.email_states s JOIN synedre.raw_messages r"
                     " ON r.id = s.message_id WHERE r.mailbox = 'synedre-reports'") == [(0,)]

    # next month is another report
    assert mail_monthly(now=datetime.now(UTC) + timedelta(days=32)).outcome == "sent"
    assert len(mailed.received) == 2


def q_all(url, sql, *args):
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()
