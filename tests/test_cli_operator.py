"""Who the operator is comes from the OS (issue 25): `synedre approve`/`refuse` audit the
real uid's name, never LOGNAME or USER, which the caller sets; SUDO_USER is added only to
root's record, since anyone can set it."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys

import psycopg
import pytest
from psycopg.rows import dict_row

from synedre.cli import common
from synedre.config import Settings
from synedre.stages.poll import ingest_one
from tests.conftest import CORPUS
from tests.services import approvals, stack

pytestmark = pytest.mark.timeout(90)
ME = pwd.getpwuid(os.getuid()).pw_name
SPOOFED = {"LOGNAME": "someone", "USER": "someone", "LNAME": "someone", "USERNAME": "someone"}


def waiting_approval(url: str, tmp_path, n: int) -> int:
    """A message awaiting the founder's OK, its request opened by the gate as the approval
    stage opens it (the run/plan rule on)."""
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    raw = raw.replace(b"Message-ID: <", f"Message-ID: <operator{n}.".encode(), 1)
    mid = ingest_one(raw, "atlas", 1, n, Settings(state_dir=tmp_path), lambda _: None)
    policy = tmp_path / "policy.toml"
    policy.write_text("[run_plan]\nenabled = true\n")
    with psycopg.connect(url, row_factory=dict_row, autocommit=True) as conn:
        conn.execute("UPDATE synedre.email_states SET status = 'materialized', intent = 'run', complexity = 'plan',"
                     " confidence = 0.93 WHERE message_id = %s", (mid,))
        state = conn.execute("SELECT s.*, r.message_id AS message_id_header, NULL::text AS client_codename"
                             " FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id"
                             " WHERE s.message_id = %s", (mid,)).fetchone()
        with conn.transaction():
            done = approvals.gate(conn, state, "plan", "claude-sonnet",
                                  Settings(state_dir=tmp_path, approval_policy_file=policy))
    assert str(done.status) == "awaiting_approval"
    return mid


def synedre(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """The real CLI, in the test's environment (its database, Redis db 10) changed by `env`."""
    merged = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], env=merged, capture_output=True,
                          text=True, timeout=60, cwd=stack.ROOT)


def decided(url: str, mid: int) -> tuple[str, list[str]]:
    with psycopg.connect(url) as conn:
        by, = conn.execute("SELECT decided_by FROM synedre.approvals WHERE message_id = %s", (mid,)).fetchone()
        audited = [r[0] for r in conn.execute(
            "SELECT detail->>'by' FROM synedre.audit_log WHERE message_id = %s"
            " AND event IN ('approval_granted', 'approval_refused')", (mid,))]
    return by, audited


def test_approve_audits_the_real_os_user_whatever_logname_and_user_say(db, redis_db, tmp_path):
    mid = waiting_approval(db, tmp_path, 1)
    out = synedre("approve", str(mid), **SPOOFED, SUDO_USER=None)
    assert out.returncode == 0, out.stderr
    assert decided(db, mid) == (f"operator:{ME}", [f"operator:{ME}"])
    assert f"(by operator:{ME})" in out.stdout and "someone" not in out.stdout


def test_sudo_user_is_recorded_beside_root_and_believed_from_root_only(db, tmp_path):
    mid = waiting_approval(db, tmp_path, 2)
    out = synedre("refuse", str(mid), "--reason", "non", **SPOOFED, SUDO_USER="alice")
    assert out.returncode == 0, out.stderr
    by = f"operator:{ME} (sudo from alice)" if os.getuid() == 0 else f"operator:{ME}"
    assert decided(db, mid) == (by, [by])


@pytest.mark.unit
def test_a_user_who_sets_sudo_user_is_recorded_as_himself(monkeypatch):
    nobody = pwd.getpwnam("nobody")
    monkeypatch.setattr(os, "getuid", lambda: nobody.pw_uid)
    for name, value in {**SPOOFED, "SUDO_USER": "alice"}.items():
        monkeypatch.setenv(name, value)
    assert common.operator() == "nobody"
    monkeypatch.setattr(os, "getuid", lambda: 0)
    monkeypatch.setenv("SUDO_USER", pwd.getpwuid(0).pw_name)  # root's own sudo: said once
    assert common.operator() == pwd.getpwuid(0).pw_name
    monkeypatch.setenv("SUDO_USER", "alice")
    assert common.operator() == f"{pwd.getpwuid(0).pw_name} (sudo from alice)"
    monkeypatch.setattr(os, "getuid", lambda: 2_000_000_000)  # no passwd entry
    monkeypatch.delenv("SUDO_USER")
    assert common.operator() == "uid 2000000000"
