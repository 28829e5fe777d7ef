"""Ingestion end to end: real Dovecot, real Celery workers, embedded PostgreSQL, Redis."""
from __future__ import annotations

import email
import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import test.test_email
from imapclient import SEEN

from tests.conftest import CORPUS
from tests.services import stack
from tests.services.stack import q

pytestmark = pytest.mark.timeout(240)

CPYTHON_DATA = Path(test.test_email.__file__).parent / "data"
DKIM_PASS = {"P01", "P02", "P05", "P06", "P07", "P08", "P10", "P12", "P15", "P18", "P20", "P21"}


def corpus() -> list[tuple[str, bytes]]:
    files = sorted((CORPUS / "cases").glob("*.eml")) + sorted(CPYTHON_DATA.glob("msg_*.txt"))
    assert len(files) >= 22 + 40
    return [(f.name, f.read_bytes()) for f in files]


def distinct_count(messages) -> int:
    """Distinct messages as a mail admin counts them: by Message-ID, else by content."""
    keys = set()
    for _, raw in messages:
        mid = email.message_from_bytes(raw).get("Message-ID")
        keys.add(mid.strip() if mid else hashlib.sha256(raw).hexdigest())
    return len(keys)


def append_all(dovecot, messages) -> None:
    with dovecot.client() as c:
        for _, raw in messages:
            c.append("INBOX", raw)


def mailbox_flags(dovecot) -> dict[int, tuple]:
    with dovecot.client() as c:
        c.select_folder("INBOX", readonly=True)
        return {uid: d[b"FLAGS"] for uid, d in c.fetch(c.search("ALL"), ["FLAGS"]).items()}


def send_poll(env) -> None:
    from tasks.app import app
    app.send_task("synedre.poll", args=["atlas"])


def all_seen(dovecot) -> bool:
    flags = mailbox_flags(dovecot)
    return bool(flags) and all(SEEN in f for f in flags.values())


def test_corpus_and_cpython_messages_each_stored_once_and_marked_seen(services):
    env, dovecot, url = services["env"], services["dovecot"], services["db"]
    messages = corpus()
    expected = distinct_count(messages)
    append_all(dovecot, messages)
    worker = stack.celery_worker(env, services["logs"])
    try:
        send_poll(env)
        stack.wait_for(lambda: all_seen(dovecot), 120, "every UID \\Seen")
        # (1) one raw row, one state row, one poll_inserted per distinct message
        assert q(url, "SELECT count(*) FROM synedre.raw_messages")[0][0] == expected
        assert q(url, "SELECT count(*) FROM synedre.email_states")[0][0] == expected
        per_msg = q(url, """SELECT r.id, count(a.id) FROM synedre.raw_messages r
                              LEFT JOIN synedre.audit_log a ON a.message_id = r.id AND a.event = 'poll_inserted'
                             GROUP BY r.id""")
        assert all(n == 1 for _, n in per_msg)
        statuses = dict(q(url, "SELECT status, count(*) FROM synedre.email_states GROUP BY 1"))
        assert set(statuses) <= {"received", "parse_failed"}
        # every received message waits, visibly, in the scan queue
        queued = [json.loads(m)["headers"]["argsrepr"] for m in services["redis"].lrange("scan", 0, -1)]
        assert sorted(queued) == sorted(f"[{i}]" for i, in q(
            url, "SELECT message_id FROM synedre.email_states WHERE status = 'received'"))

        # (5) DKIM through the real mailbox round trip
        by_id = dict(q(url, "SELECT message_id, dkim_pass FROM synedre.raw_messages"))
        cases = {name[:3]: email.message_from_bytes(raw)["Message-ID"] for name, raw in messages
                 if name.startswith("P")}
        dkim = {case: by_id[mid.strip()] for case, mid in cases.items() if mid}
        assert len(dkim) == 21  # P22 has no Message-ID: found by subject instead
        p22 = q(url, "SELECT dkim_pass, message_id FROM synedre.raw_messages WHERE subject = 'sans identifiant'")
        assert len(p22) == 1 and p22[0][0] is False
        assert p22[0][1].endswith("@synthetic.synedre.invalid>")
        assert {c for c, p in dkim.items() if p} == DKIM_PASS

        # (8) inspect --all --json lists every message with its audits
        out = subprocess.run([sys.executable, "-m", "synedre.cli", "inspect", "--all", "--json"],
                             env=env, capture_output=True, timeout=60, check=True, cwd=stack.ROOT)
        listed = json.loads(out.stdout)
        assert len(listed) == expected
        assert all(m["audits"][0] == "poll_inserted" for m in listed)
        assert {m["status"] for m in listed} <= {"received", "parse_failed"}
        one = listed[0]
        assert set(one) >= {"message_id", "subject", "status", "dkim_pass", "intent", "complexity",
                            "confidence", "client", "materialized", "chantier", "audits"}

        # (2) the same messages again: no new state rows, each seen
        append_all(dovecot, messages)
        send_poll(env)
        stack.wait_for(lambda: all_seen(dovecot), 120, "the second delivery \\Seen")
        assert q(url, "SELECT count(*) FROM synedre.email_states")[0][0] == expected
        # first round: the corpus's own repeated Message-IDs; second round: every message
        assert q(url, "SELECT count(*) FROM synedre.audit_log WHERE event = 'poll_duplicate'")[0][0] \
            == (len(messages) - expected) + len(messages)
        assert worker.alive(), "a worker crashed"
        assert "Traceback" not in worker.output()
    finally:
        worker.stop()


def test_concurrent_polls_from_beat_idle_and_manual_calls_process_each_uid_once(services, monkeypatch):
    env = {**services["env"], "SYNEDRE_POLL_INTERVAL_S": "6"}
    dovecot, url, logs = services["dovecot"], services["db"], services["logs"]
    messages = corpus()
    procs = stack.celery_workers(env, logs, ("poll", 2), ("poll", 2))
    try:
        procs.append(stack.celery_beat(env, logs))
        procs.append(stack.idle_watcher(env, logs))
        append_all(dovecot, messages)  # IDLE fires while beat and manual calls race it
        for _ in range(4):
            send_poll(env)
        stack.wait_for(lambda: all_seen(dovecot), 120, "every UID \\Seen")
        stack.wait_for(lambda: "synedre.poll" in procs[2].output(), 30, "beat to send a poll")
        expected = distinct_count(messages)
        assert q(url, "SELECT count(*) FROM synedre.raw_messages")[0][0] == expected
        assert q(url, "SELECT count(*) FROM synedre.audit_log WHERE event = 'poll_inserted'")[0][0] == expected
        # no UID was handed to the next stage twice
        queued = [json.loads(m)["headers"]["argsrepr"] for m in services["redis"].lrange("scan", 0, -1)]
        assert len(queued) == len(set(queued))
        assert q(url, "SELECT count(*) FROM synedre.audit_log WHERE event = 'poll_duplicate'")[0][0] \
            == len(messages) - expected  # only the corpus's own duplicate Message-IDs
    finally:
        stack.stop_all(procs)
    assert all("Traceback" not in p.output() for p in procs)


CRASHING_WORKER = """
import os, signal, imapclient
real = imapclient.IMAPClient.add_flags
def add_flags(self, messages, flags, silent=False):
    os.kill(os.getpid(), signal.SIGKILL)  # after the commit, before \\\\Seen
imapclient.IMAPClient.add_flags = add_flags
import sys
from tasks.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_worker_killed_between_commit_and_seen_loses_nothing_and_stores_once(services, tmp_path):
    env = {**services["env"], "SYNEDRE_POLL_LOCK_TTL_S": "3"}
    dovecot, url, logs = services["dovecot"], services["db"], services["logs"]
    name, raw = corpus()[1]
    append_all(dovecot, [(name, raw)])
    script = tmp_path / "crashing_worker.py"
    script.write_text(CRASHING_WORKER)
    crashing = stack.celery_worker(env, logs, pool="solo", concurrency=1, module=[str(script)])
    send_poll(env)
    stack.wait_for(lambda: not crashing.alive(), 60, "the worker to die")
    assert crashing.proc.returncode == -signal.SIGKILL
    crashing.stop()
    assert q(url, "SELECT count(*) FROM synedre.email_states")[0][0] == 1  # committed
    assert not all_seen(dovecot)  # but never marked seen

    worker = stack.celery_worker(env, logs)
    try:
        def polled_and_seen():  # as beat would: a poll every second until the lock expires
            send_poll(env)
            return all_seen(dovecot)
        stack.wait_for(polled_and_seen, 60, "the UID \\Seen after restart", interval=1)
        assert q(url, "SELECT count(*) FROM synedre.raw_messages")[0][0] == 1
        assert q(url, "SELECT count(*) FROM synedre.email_states")[0][0] == 1
        assert q(url, "SELECT event FROM synedre.audit_log ORDER BY id") == [("poll_inserted",)]
        (mid,), = q(url, "SELECT message_id FROM synedre.email_states")
        queued = {json.loads(m)["headers"]["argsrepr"] for m in services["redis"].lrange("scan", 0, -1)}
        assert queued == {f"[{mid}]"}  # handed on (again), nothing lost
    finally:
        worker.stop()


def test_a_poll_asked_while_a_killed_poller_holds_the_lock_runs_once_the_lock_is_free(services, tmp_path):
    """A poller killed mid-poll keeps the mailbox's lock until it expires; the one poll asked
    for meanwhile (IDLE's, for mail that came then) finds it held and leaves it a flag that
    nobody will honour. It looks again once the lock's time is over: the new mail is stored
    with no other poll sent (beat's would come a minute later)."""
    env = {**services["env"], "SYNEDRE_POLL_LOCK_TTL_S": "15"}
    dovecot, url, logs = services["dovecot"], services["db"], services["logs"]
    first, second = corpus()[1], corpus()[2]
    append_all(dovecot, [first])
    script = tmp_path / "crashing_worker.py"
    script.write_text(CRASHING_WORKER)
    crashing = stack.celery_worker(env, logs, pool="solo", concurrency=1, module=[str(script)])
    send_poll(env)
    stack.wait_for(lambda: not crashing.alive(), 60, "the worker to die")
    crashing.stop()
    append_all(dovecot, [second])  # arrives while the dead poller's lock holds

    worker = stack.celery_worker(env, logs)
    try:
        # the dead poller's lock, 8 s left whatever the worker's start took (its own TTL could run out)
        services["redis"].set("synedre:poll:atlas", "killed-holder", px=8000)
        send_poll(env)
        stack.wait_for(lambda: "another poll holds the lock" in worker.output(), 30, "the poll to find the lock")
        stack.wait_for(lambda: all_seen(dovecot), 40, "both UIDs \\Seen once the lock expired", interval=0.5)
        assert q(url, "SELECT count(*) FROM synedre.raw_messages")[0][0] == 2
        # the first again (committed, never \Seen: a duplicate) and the new one, by one poll
        assert worker.output().count("'unseen': 2, 'inserted': 1, 'duplicates': 1") == 1
    finally:
        worker.stop()
