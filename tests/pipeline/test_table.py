"""The pipeline table holds together: every status is consumed or terminal, every queue served."""
import ast
import re
from pathlib import Path
from typing import get_args

from synedre import celeryconfig
from synedre.classify.schema import Intent
from synedre.pipeline import MACHINES, STAGES, TERMINAL, WORKER_GROUPS, Status, consumer_of, group_queues, queues

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


def test_the_schema_allows_every_status_of_every_machine():
    text = "\n".join(p.read_text() for p in sorted((ROOT / "migrations").glob("*.sql")))
    migration = next(p.read_text() for p in sorted((ROOT / "migrations").glob("*.sql"), reverse=True)
                     if "email_states_status_check CHECK" in p.read_text())
    allowed = set(re.findall(r"'([a-z_]+)'", migration.split("email_states_status_check CHECK (status IN (", 1)[1]
                                         .split("));", 1)[0]))
    assert {str(s) for s in Status} <= allowed
    for table, machine in MACHINES.items():
        if table == "email_states":
            continue
        check = re.search(rf"CREATE TABLE synedre\.{table} \([^;]*?status text[^,]*CHECK \(status IN \(([^)]*)\)",
                          text, re.S)
        if check is None:  # launches: its statuses are the code's alone (no CHECK in the schema)
            assert table == "launches", table
            continue
        assert set(re.findall(r"'([a-z_]+)'", check.group(1))) == {str(s) for s in machine}, table


# -- the one door ---------------------------------------------------------------------------

PACKAGE = sorted([*ROOT.glob("synedre/**/*.py"), *ROOT.glob("tasks/*.py")])
RUNNER = ROOT / "synedre" / "runner" / "doors.py"
WRITES_STATUS = re.compile(
    r"UPDATE\s+synedre\.email_states\b(?:\s+\w+)?\s+SET\b(?:(?!\bWHERE\b).)*?(?<![\w.])(?:\w+\.)?status\s*="
    r"|INSERT\s+INTO\s+synedre\.email_states\s*\([^)]*\bstatus\b", re.S | re.I)


def sql_strings(path: Path) -> list[tuple[int, str]]:
    """Every string the module holds, f-strings with their holes as `{}`, adjacent literals joined."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            out.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)))
    return out


def test_the_detector_sees_every_way_a_status_is_written():
    for sql in ["UPDATE synedre.email_states SET status = %s WHERE message_id = %s",
                "UPDATE synedre.email_states s\n   SET claimed_at = now(), status = 'x' WHERE true",
                "update synedre.email_states set waiting_reason = NULL, s.status = {} where 1=1",
                "INSERT INTO synedre.email_states (message_id, status) VALUES (1, 'received')"]:
        assert WRITES_STATUS.search(sql), sql
    for sql in ["UPDATE synedre.email_states SET waiting_reason = %s WHERE status = 'read'",
                "UPDATE synedre.email_states SET claimed_at = now(), status_at = now() WHERE status = %s",
                "UPDATE synedre.qa_checks SET status = 'running'"]:
        assert not WRITES_STATUS.search(sql), sql


def test_no_module_but_the_runner_writes_a_message_status():
    writers = {(p.relative_to(ROOT).as_posix(), line) for p in PACKAGE for line, s in sql_strings(p)
               if WRITES_STATUS.search(s)}
    assert {w for w in writers if w[0] != "synedre/runner/doors.py"} == set()
    # the runner's doors: claim, write, release, admit, move, the launch's claim, resume and
    # finish, the sweep's reclaim, the operator's retry
    assert len({w for w in writers if w[0] == "synedre/runner/doors.py"}) == 10


WRITES_OUTBOUND_STATUS = re.compile(
    r"UPDATE\s+synedre\.outbound_mail\b(?:\s+\w+)?\s+SET\b(?:(?!\bWHERE\b).)*?(?<![\w.])(?:\w+\.)?status\s*="
    r"|INSERT\s+INTO\s+synedre\.outbound_mail\b(?:\s+AS\s+\w+)?\s*\([^)]*\bstatus\b", re.S | re.I)


def test_no_module_but_the_outbox_writes_an_outbound_mail_status():
    """The outbound mail's machine has its own single writer, synedre/mail/outbox.py: the
    send loop, the transport and the stages go through its doors."""
    writers = {p.relative_to(ROOT).as_posix() for p in PACKAGE for _, s in sql_strings(p)
               if WRITES_OUTBOUND_STATUS.search(s)}
    assert writers == {"synedre/mail/outbox.py"}


def named_values(path: Path) -> list[tuple[int, str]]:
    """The module's plain string values, but for what only shares a status's word: a key of a
    dict or a row (`r["materialized"]`, JSON output) and a log line's event name."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            skip |= {id(k) for k in node.keys if k is not None}
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "log" and node.args):
            skip.add(id(node.args[0]))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def test_no_status_literal_outside_the_pipeline_table():
    """A status is named through its machine's enum: no stored value retyped as a string in
    code, nor in SQL (`status = 'scanned'`, `status IN ('pending', ...)`). The intent `noise`
    shares its word with the status it leads to; it is the classifier's value, not a status."""
    message = {str(s) for s in Status} - set(get_args(Intent))
    every = {str(v) for machine in MACHINES.values() for v in machine}
    in_sql = re.compile(r"status\s*(?:=|<>|!=|IN\s*\()\s*'([a-z_]+)'|SET\s+status\s*=\s*'([a-z_]+)'", re.I)
    offenders = []
    for p in PACKAGE:
        if p == ROOT / "synedre" / "pipeline.py":
            continue
        offenders += [f"{p.relative_to(ROOT)}:{line}: {s!r}" for line, s in named_values(p) if s in message]
        for line, s in sql_strings(p):
            offenders += [f"{p.relative_to(ROOT)}:{line}: {m.group(0)}" for m in in_sql.finditer(s)
                          if (m.group(1) or m.group(2)) in every]
    assert offenders == []
