"""The stage runner's doors against the real database, one at a time: the claim and its
attempt, the fenced write and release, the lease, the unclaimed move and the launch's
claim and end. Each asserts the rows as stored (status, attempt, waiting reason, audit
detail), so that a door that writes a little wrong fails here, not only in a whole run
(written for the mutation run, docs/mutation.md)."""
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.rows import dict_row

from synedre import db as dbmod, runner
from synedre.config import Settings
from synedre.db import messages
from synedre.pipeline import BY_NAME, LaunchStatus, Status
from synedre.runner import doors
from synedre.stages.poll import ingest_one
from tests.conftest import CORPUS

pytestmark = pytest.mark.timeout(60)
SCAN, OCR, SPAWN, QA_ROUTE = BY_NAME["scan"], BY_NAME["ocr"], BY_NAME["spawn"], BY_NAME["qa_route"]


@pytest.fixture
def conn(db):
    with psycopg.connect(db, row_factory=dict_row, autocommit=True) as c:
        yield c


@pytest.fixture
def mid(db, tmp_path):
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    return ingest_one(raw, "atlas", 1, 1, Settings(state_dir=tmp_path), lambda _: None)


def state(conn, mid):
    return conn.execute("SELECT * FROM synedre.email_states WHERE message_id = %s", (mid,)).fetchone()


def audits(conn, mid, event):
    return [r["detail"] for r in conn.execute(
        "SELECT detail FROM synedre.audit_log WHERE message_id = %s AND event = %s ORDER BY id", (mid, event))]


def materialized(conn, mid, complexity="leger"):
    run = conn.execute("INSERT INTO synedre.runs (ref_type, ref_id, title, complexity)"
                       " VALUES ('atlas_inbox', %s, 't', %s) RETURNING id", (str(mid), complexity)).fetchone()["id"]
    set_status(conn, mid, Status.MATERIALIZED, intent="run", complexity=complexity, run_id=run)


def set_status(conn, mid, status, **cols):
    sets = "".join(f", {k} = %({k})s" for k in cols)
    conn.execute(f"UPDATE synedre.email_states SET status = %(s)s{sets} WHERE message_id = %(m)s",
                 {"s": str(status), "m": mid, **cols})


def test_a_claim_moves_the_message_to_running_with_the_next_attempt_and_only_once(conn, mid):
    set_status(conn, mid, Status.RECEIVED, waiting_reason="waited", waiting_until=datetime.now(UTC))
    before = state(conn, mid)["stage_attempt"]
    with conn.transaction():
        c = runner.claim(conn, SCAN, mid)
    row = state(conn, mid)
    assert (c.stage, c.message_id, c.attempt) == (SCAN, mid, before + 1)
    assert c.state["message_id"] == mid and c.state["mailbox"] == "atlas" and "raw" in c.state
    assert (row["status"], row["stage_attempt"]) == ("scanning", before + 1)
    assert row["claimed_at"] is not None and row["waiting_reason"] is None and row["waiting_until"] is None
    assert runner.claim(conn, SCAN, mid) is None  # at scanning: not an entry status any more
    assert runner.claim(conn, OCR, mid) is None


def test_the_claim_counts_the_attachments_and_their_rows_are_read_only_when_there_are_some(conn, mid, tmp_path):
    with conn.transaction():
        c = runner.claim(conn, SCAN, mid)
    assert c.state["attachment_count"] == 0
    assert messages.attachments_of(None, c.state) == []  # no query: there is no connection to ask
    raw = (CORPUS / "cases" / "P07-founder-screenshot-false-noise.eml").read_bytes()
    other = ingest_one(raw, "atlas", 1, 2, Settings(state_dir=tmp_path), lambda _: None)
    with conn.transaction():
        c = runner.claim(conn, SCAN, other)
        rows = messages.attachments_of(conn, c.state)
    assert c.state["attachment_count"] == len(rows) > 0 and [r["idx"] for r in rows] == sorted(r["idx"] for r in rows)
    assert doors.state_of(conn, other)["attachment_count"] == len(rows)


def test_the_write_moves_to_the_exit_with_its_fields_and_audit_only_for_the_owning_attempt(conn, mid):
    with conn.transaction():
        c = runner.claim(conn, SCAN, mid)
    done = runner.Done(Status.SCANNED, detail={"attachments": 2, "stage": "forged"},
                       fields={"intent": "run", "complexity": "plan"})
    time.sleep(0.3)  # the stage's work, timed from the claim
    with conn.transaction():
        assert runner.settle(conn, c, done) is done
    row = state(conn, mid)
    assert (row["status"], row["intent"], row["complexity"], row["claimed_at"]) == ("scanned", "run", "plan", None)
    [detail] = audits(conn, mid, "scanned")
    assert detail["attachments"] == 2 and detail["stage"] == "scan" and detail["attempt"] == c.attempt
    took = detail["duration_s"]
    assert isinstance(took, float) and 0.3 <= took < 1.0 and took == round(took, 6)
    with pytest.raises(runner.FencedOut, match=f"message {mid}: scan attempt {c.attempt} no longer owns it"), \
            conn.transaction():  # written already: not owned any more
        runner.settle(conn, c, runner.Done(Status.BLOCKED_UNSAFE_ATTACHMENT))
    assert state(conn, mid)["status"] == "scanned" and audits(conn, mid, "blocked_unsafe_attachment") == []


def test_a_superseded_attempt_writes_nothing_and_the_current_one_does(conn, mid):
    with conn.transaction():
        old = runner.claim(conn, SCAN, mid)
    set_status(conn, mid, Status.RECEIVED)  # an operator's retry, then a second execution
    with conn.transaction():
        new = runner.claim(conn, SCAN, mid)
    assert new.attempt == old.attempt + 1
    for result in (runner.Done(Status.SCANNED), runner.Held("late", "scan_held")):
        with pytest.raises(runner.FencedOut, match=f"message {mid}: scan attempt {old.attempt} no longer"), \
                conn.transaction():
            runner.settle(conn, old, result)
    assert state(conn, mid)["status"] == "scanning" and audits(conn, mid, "scan_held") == []
    with conn.transaction():
        runner.settle(conn, new, runner.Done(Status.SCANNED, event="scan_ok"))
    assert state(conn, mid)["status"] == "scanned" and audits(conn, mid, "scan_ok")[0]["attempt"] == new.attempt


def test_a_held_result_hands_the_message_back_to_wait_with_its_reason_and_until(conn, mid):
    with conn.transaction():
        c = runner.claim(conn, SCAN, mid)
    until = datetime.now(UTC) + timedelta(minutes=5)
    with conn.transaction():
        runner.settle(conn, c, runner.Held("clamd unreachable", "scan_waiting", until=until))
    row = state(conn, mid)
    assert (row["status"], row["waiting_reason"], row["claimed_at"]) == ("received", "clamd unreachable", None)
    assert abs((row["waiting_until"] - until).total_seconds()) < 1
    [detail] = audits(conn, mid, "scan_waiting")
    assert detail == {"reason": "clamd unreachable", "stage": "scan", "attempt": c.attempt,
                      "until": until.isoformat()}
    with conn.transaction():
        c2 = runner.claim(conn, SCAN, mid)
    with conn.transaction():
        runner.settle(conn, c2, runner.Held("again", "scan_waiting"))
    assert audits(conn, mid, "scan_waiting")[1]["until"] is None and state(conn, mid)["waiting_until"] is None


def test_the_lease_is_renewed_only_for_the_owning_attempt(conn, mid):
    with conn.transaction():
        c = runner.claim(conn, SCAN, mid)
    conn.execute("UPDATE synedre.email_states SET claimed_at = now() - interval '1 hour' WHERE message_id = %s",
                 (mid,))
    assert doors.renew(conn, c) is True
    assert state(conn, mid)["claimed_at"] > datetime.now(UTC) - timedelta(minutes=1)
    stale = runner.Claim(SCAN, mid, c.attempt - 1, c.state)
    assert doors.renew(conn, stale) is False
    with conn.transaction():
        runner.settle(conn, c, runner.Done(Status.SCANNED))
    assert doors.renew(conn, c) is False  # written: nothing left to renew


class Probe(runner.StageCode):
    """A stage whose steps record what they see: each in its own transaction, or none."""
    def __init__(self, stage, conn, mid, work=None, result=None):
        self.stage, self.conn, self.mid, self.seen = stage, conn, mid, {}
        self._work, self.result = work, result

    def load(self, tx, c):  # in the claim's transaction: it sees the claim
        return (state(tx, self.mid)["status"], c.attempt)

    def work(self, c, loaded):
        if self._work:
            return self._work()
        self.seen["work"] = (loaded, c.attempt, state(self.conn, self.mid)["status"])
        return "worked"

    def write(self, tx, c, worked):
        self.seen["write"] = (worked, state(tx, self.mid)["status"])
        return self.result or runner.Done(Status.SCANNED if self.stage == SCAN else Status.QA_PASSED)

    def after(self, c, worked, result):
        self.seen["after"] = (getattr(result, "status", result), state(self.conn, self.mid)["status"])


def test_run_claims_loads_works_writes_then_runs_the_after_step(db, conn, mid):
    probe = Probe(SCAN, conn, mid)
    out = runner.run(probe, mid)
    attempt = state(conn, mid)["stage_attempt"]
    assert out.status == Status.SCANNED
    assert probe.seen == {"work": (("scanning", attempt), attempt, "scanning"), "write": ("worked", "scanning"),
                          "after": (Status.SCANNED, "scanned")}
    again = Probe(SCAN, conn, mid)
    assert runner.run(again, mid) == runner.Skip("already past scan (status scanned)", moved_on=True)
    assert again.seen == {}  # nothing loaded, worked or written


def test_run_releases_on_an_error_and_refuses_a_claimed_skip(db, conn, mid):
    def boom():
        raise OSError("disk full")
    with pytest.raises(OSError):
        runner.run(Probe(SCAN, conn, mid, work=boom), mid)
    row = state(conn, mid)
    assert row["status"] == "received" and row["waiting_reason"] == "error: OSError: disk full"
    assert audits(conn, mid, "stage_error")[0]["reason"] == "error: OSError: disk full"
    with pytest.raises(TypeError, match="a Skip writes nothing"):
        runner.run(Probe(SCAN, conn, mid, result=runner.Skip("nothing")), mid)
    assert state(conn, mid)["status"] == "received"  # handed back, with its reason
    assert audits(conn, mid, "stage_error")[1]["reason"].startswith("error: TypeError")


class InstantProbe(Probe):
    def instant(self, loaded):
        return True


def test_an_instant_stage_is_claimed_worked_and_written_in_one_transaction_or_not_at_all(db, conn, mid):
    probe = InstantProbe(SCAN, conn, mid)
    assert runner.run(probe, mid).status == Status.SCANNED
    attempt = state(conn, mid)["stage_attempt"]
    # its work ran in the claim's transaction: uncommitted, another connection saw it at received
    assert probe.seen == {"work": (("scanning", attempt), attempt, "received"), "write": ("worked", "scanning"),
                          "after": (Status.SCANNED, "scanned")}
    assert [d["attempt"] for d in audits(conn, mid, "scanned")] == [attempt]
    set_status(conn, mid, Status.RECEIVED)

    def boom():
        raise OSError("disk full")
    with pytest.raises(OSError):
        runner.run(InstantProbe(SCAN, conn, mid, work=boom), mid)
    row = state(conn, mid)  # the claim rolled back with the rest: nothing to hand back
    assert (row["status"], row["stage_attempt"], row["claimed_at"]) == ("received", attempt, None)
    # and the operator reads why, as for a handed-back claim: the waiting reason, a stage_error audit
    assert row["waiting_reason"] == "error: OSError: disk full"
    [error] = audits(conn, mid, "stage_error")
    assert error["reason"] == "error: OSError: disk full" and error["stage"] == "scan" and error["rolled_back"]
    assert len(audits(conn, mid, "scanned")) == 1


def test_an_unclaimed_stage_moves_the_message_only_from_where_it_found_it(db, conn, mid):
    set_status(conn, mid, Status.QA)
    probe = Probe(QA_ROUTE, conn, mid)
    out = runner.run(probe, mid)
    assert out.status == Status.QA_PASSED and state(conn, mid)["status"] == "qa_passed"
    assert probe.seen["work"] == (("qa", None), None, "qa")  # not claimed: no attempt
    assert len(audits(conn, mid, "qa_passed")) == 1
    set_status(conn, mid, Status.QA)

    def moved_meanwhile():  # a concurrent last check wrote the verdict first
        set_status(conn, mid, Status.QA_FAILED)
        return "worked"
    assert runner.run(Probe(QA_ROUTE, conn, mid, work=moved_meanwhile), mid) == \
        runner.Skip("moved meanwhile from qa: nothing written")
    assert len(audits(conn, mid, "qa_passed")) == 1
    set_status(conn, mid, Status.QA)
    held = runner.run(Probe(QA_ROUTE, conn, mid, result=runner.Held("two routes left", "qa_waiting")), mid)
    assert held.why == "two routes left" and state(conn, mid)["status"] == "qa"
    assert state(conn, mid)["waiting_reason"] == "two routes left"


@pytest.mark.parametrize("status,why", [
    (Status.SCANNING, runner.Skip("scan already in progress")),
    (Status.READING, runner.Skip("at reading: ocr in progress")),
    (Status.SCANNED, runner.Skip("already past scan (status scanned)", moved_on=True)),
])
def test_why_not_says_where_the_message_is(conn, mid, status, why):
    set_status(conn, mid, status)
    assert runner.why_not(conn, SCAN, mid) == why
    assert runner.why_not(conn, SCAN, mid + 1000) == runner.Skip("no such message")


def test_not_yet_at_a_stage_is_not_moved_on(conn, mid):
    assert runner.why_not(conn, OCR, mid) == runner.Skip("not yet at ocr (status received)")


def test_an_unclaimed_move_happens_once_from_the_status_it_names(conn, mid):
    set_status(conn, mid, Status.QA)
    done = runner.Done(Status.QA_PASSED, detail={"routes": 3})
    with conn.transaction():
        assert runner.move(conn, QA_ROUTE, mid, done, at=Status.QA) is True
    with conn.transaction():
        assert runner.move(conn, QA_ROUTE, mid, runner.Done(Status.QA_FAILED), at=Status.QA) is False
    row = state(conn, mid)
    assert row["status"] == "qa_passed" and audits(conn, mid, "qa_passed") == [{"routes": 3}]
    assert audits(conn, mid, "qa_failed") == []


def test_a_launch_claim_and_its_end_are_fenced_by_the_launch_attempt(conn, mid):
    materialized(conn, mid)
    before = state(conn, mid)["launch_attempt"]
    with conn.transaction():
        c = runner.claim_launch(conn, mid, model="sonnet")
    row = state(conn, mid)
    assert (row["status"], row["launch_attempt"], c.attempt) == ("spawning", before + 1, before + 1)
    assert row["claimed_at"] is not None
    assert conn.execute("SELECT model, iteration, attempt FROM synedre.launches WHERE id = %s",
                        (c.launch_id,)).fetchone() == {"model": "sonnet", "iteration": 1, "attempt": c.attempt}
    with conn.transaction():
        assert runner.claim_launch(conn, mid) is None
    with conn.transaction():
        runner.finish_launch(conn, c, runner.Done(Status.SPAWN_FAILED, "spawn_failed", detail={"x": 1}),
                             outcome=LaunchStatus.FAILED, reason="invalid_contract", num_turns=4)
    row = state(conn, mid)
    assert (row["status"], row["claimed_at"]) == ("spawn_failed", None)
    launch = conn.execute("SELECT * FROM synedre.launches WHERE id = %s", (c.launch_id,)).fetchone()
    assert (launch["status"], launch["stop_reason"], launch["num_turns"]) == ("failed", "invalid_contract", 4)
    assert launch["ended_at"] is not None
    [detail] = audits(conn, mid, "spawn_failed")
    assert detail == {"attempt": c.attempt, "launch_id": c.launch_id, "reason": "invalid_contract", "x": 1}


def test_an_iteration_is_claimed_from_qa_failed_after_exactly_its_previous_launches(conn, mid):
    materialized(conn, mid, "plan")
    with conn.transaction():
        first = runner.claim_launch(conn, mid)
    with conn.transaction():
        runner.finish_launch(conn, first, runner.Done(Status.SPAWNED, "spawn_action_done"),
                             outcome=LaunchStatus.SUCCEEDED, reason="result")
    set_status(conn, mid, Status.QA_FAILED)
    with conn.transaction():
        assert runner.claim_launch(conn, mid, iteration=3) is None  # one launch so far, not two
    with conn.transaction():
        second = runner.claim_launch(conn, mid, iteration=2)
    assert second is not None and second.attempt == first.attempt + 1
    assert conn.execute("SELECT iteration FROM synedre.launches WHERE id = %s",
                        (second.launch_id,)).fetchone()["iteration"] == 2
    with pytest.raises(runner.FencedOut), conn.transaction():  # the first launch cannot end it
        runner.finish_launch(conn, first, runner.Done(Status.SPAWN_FAILED), outcome=LaunchStatus.FAILED,
                             reason="late")
    assert state(conn, mid)["status"] == "spawning"


def test_the_pool_sees_what_the_doors_committed(db, mid):
    with dbmod.transaction() as tx:
        c = runner.claim(tx, SCAN, mid)
    with dbmod.transaction() as tx:
        assert runner.claim(tx, SCAN, mid) is None and c.attempt >= 1
