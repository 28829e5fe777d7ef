"""The pipeline table holds together: every status is consumed or terminal, every queue served."""
import re
from pathlib import Path

from synedre import celeryconfig
from synedre.pipeline import STAGES, TERMINAL, WORKER_GROUPS, Status, consumer_of, group_queues, queues

ROOT = Path(__file__).resolve().parents[2]


def test_every_non_terminal_status_has_a_stage_that_consumes_it_and_a_stuck_limit():
    running = {s.running for s in STAGES if s.running}
    for status in Status:
        if status in TERMINAL:
            assert consumer_of(status) is None, f"{status} is terminal but {consumer_of(status).name} takes it"
            continue
        stage = consumer_of(status) or next((s for s in STAGES if s.running == status), None)
        assert stage is not None, f"nothing moves a message on from {status}"
        assert stage.stuck_after_s > 0, f"{stage.name} has no stuck limit"
        assert status in running or consumer_of(status) is not None


def test_every_exit_is_a_status_another_stage_takes_or_a_terminal_one():
    for stage in STAGES:
        for status in stage.exits:
            assert status in TERMINAL or consumer_of(status) is not None, f"{stage.name} -> {status} leads nowhere"


def test_no_stage_enqueues_a_queue_that_no_worker_group_serves():
    served = {q for g in WORKER_GROUPS for q in group_queues(g)}
    for stage in STAGES:
        for status in stage.exits:
            nxt = consumer_of(status)
            if nxt is not None:
                assert nxt.queue in served, f"{stage.name} -> {nxt.queue}, which no worker group serves"
    assert set(queues()) <= served
    # the Celery configuration declares exactly these queues, routes every stage to its own
    assert [q.name for q in celeryconfig.task_queues] == queues()
    for stage in STAGES:
        assert celeryconfig.task_routes[f"synedre.{stage.name}"] == {"queue": stage.queue}
    assert {n: g.queues for n, g in celeryconfig.GROUPS.items()} == {n: group_queues(n) for n in WORKER_GROUPS}


def test_the_schema_allows_every_status_and_no_code_retypes_one():
    migration = next(p.read_text() for p in sorted((ROOT / "migrations").glob("*.sql"), reverse=True)
                     if "email_states_status_check CHECK" in p.read_text())
    allowed = set(re.findall(r"'([a-z_]+)'", migration.split("email_states_status_check CHECK (status IN (", 1)[1]
                                         .split("));", 1)[0]))
    assert {str(s) for s in Status} <= allowed
    # code speaks through the enum: no status retyped in SQL (`status = 'scanned'`) in stages,
    # tasks or the sweep (audit event names may share a status's word; they are not statuses)
    literal = re.compile(r"status\s*(?:=|IN \()\s*'([a-z_]+)'")
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in
                 [*ROOT.glob("synedre/*/stage.py"), *ROOT.glob("tasks/*.py"), ROOT / "synedre" / "sweep.py"]
                 for m in literal.finditer(p.read_text()) if m.group(1) in set(Status)]
    assert offenders == []
