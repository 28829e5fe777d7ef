"""The agent as its own OS user (SPEC §8 Process, §13), through the real `claude` CLI, a real
spawn worker running as root, the fleet's embedded PostgreSQL and a scripted Messages API."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import signal

import psutil
import pytest

from synedre import db
from synedre.config import Settings
from synedre.db.migrate import upgrade
from tests.conftest import _reset_settings
from tests.services import stack
from tests.services.claude_api import ScriptedModel, Sleep, bash, start_claude_api
from tests.spawn.conftest import git
from tests.spawn.test_launch_e2e import CONTRACT, SECRETS, make_launchable, q

AGENT_USER = "synedre-agent"


def _agent_user_exists() -> bool:
    try:
        pwd.getpwnam(AGENT_USER)
    except KeyError:
        return False
    return True


pytestmark = [pytest.mark.timeout(300), pytest.mark.integration,
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed"),
              pytest.mark.skipif(os.geteuid() != 0, reason="a dedicated agent user needs a root worker"),
              pytest.mark.skipif(not _agent_user_exists(), reason=f"no {AGENT_USER} user (scripts/system-deps)")]


@pytest.fixture
def fleet(tmp_path, monkeypatch, redis_db):
    """The fleet's embedded server under a fresh state dir, migrated, its application URL
    handed to the worker as `synedre fleet` does, and a client repository."""
    state = tmp_path / "state"
    monkeypatch.delenv("SYNEDRE_DATABASE_URL", raising=False)
    monkeypatch.setenv("SYNEDRE_STATE_DIR", str(state))
    monkeypatch.setattr(db, "_embedded_url", None)
    monkeypatch.setattr(db, "_pool", None)
    _reset_settings()
    s = Settings(state_dir=state, database_url=None)
    url = db.database_url(s)
    upgrade(s.migrations_dir, url)
    monkeypatch.setenv("SYNEDRE_DATABASE_URL", url)
    _reset_settings()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "preprod")
    git(repo, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-q", "--allow-empty", "-m", "init")
    logs = tmp_path / "logs"
    logs.mkdir()
    yield {"settings": s, "url": url, "state": state, "repo": repo, "logs": logs}
    if db._pool is not None:
        db._pool.close()
    db.stop_embedded(s)
    _reset_settings()


def start(fleet, model):
    api = start_claude_api(model)
    env = {**os.environ, "SYNEDRE_CLAUDE_BIN": shutil.which("claude"), "SYNEDRE_ANTHROPIC_BASE_URL": api.url,
           "SYNEDRE_ANTHROPIC_API_KEY": SECRETS[1], "SYNEDRE_AGENT_USER": AGENT_USER,
           "SYNEDRE_WORKSPACE_REPO": str(fleet["repo"]), "SYNEDRE_IDLE_TIMEOUT_S": "60",
           "SYNEDRE_LAUNCH_BUDGET_S": "150"}
    return api, stack.celery_worker(env, fleet["logs"], queues="spawn")


def tool_output(api) -> str:
    """Every tool result the CLI sent back, from the longest conversation."""
    last = max(api.main_requests(), key=lambda r: r.step or 0)
    out = []
    for m in last.body["messages"]:
        if m["role"] == "user" and isinstance(m["content"], list):
            for b in m["content"]:
                if b.get("type") == "tool_result":
                    c = b.get("content")
                    out.append(c if isinstance(c, str) else "\n".join(x.get("text", "") for x in c or []))
    return "\n".join(out)


def agent_processes(home_prefix: str) -> list[psutil.Process]:
    uid = pwd.getpwnam(AGENT_USER).pw_uid
    found = []
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] and p.info["uids"].real == uid and p.environ().get("HOME", "").startswith(home_prefix):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_the_agent_runs_as_its_user_reads_no_secret_and_is_refused_by_postgresql(fleet, tmp_path):
    state = fleet["state"]
    probe = ("id -u; echo SANDBOX=${IS_SANDBOX:-unset}; "
             "for p in $(pgrep -f '[c]elery -A tasks worker'); do "
             "if cat /proc/$p/environ >/dev/null 2>&1; then echo ENV_READ $p; else echo ENV_REFUSED $p; fi; done; "
             f"echo STATE: $(ls -A {state} 2>&1); "
             f"cat {state}/pgdata/PG_VERSION >/dev/null 2>&1 && echo PGDATA_READ || echo PGDATA_REFUSED")
    attack = ("psql -X -c \"UPDATE synedre.email_states SET status = 'actioned'\" 2>&1; echo UPDATE_RC=$?; "
              "psql -X -c \"SELECT raw FROM synedre.raw_messages\" 2>&1; echo SELECT_RC=$?; "
              "echo PGUSER=$PGUSER PGHOST=$PGHOST")
    model = ScriptedModel([[bash(probe)], [bash(attack)],
                           [bash(f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\"")],
                           [bash("echo fix > fix.txt && git add fix.txt && git commit -qm 'agent commit'")]])
    mid, = make_launchable(fleet["url"], tmp_path)
    api, worker = start(fleet, model)
    try:
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: q(fleet["url"], "SELECT 1 FROM synedre.launches WHERE status <> 'running'"),
                       200, "the launch to finish", interval=0.5)
        worker_pids = {worker.proc.pid, *(c.pid for c in psutil.Process(worker.proc.pid).children())}
    finally:
        worker.stop()
        api.stop()
    out = tool_output(api)
    (status, reason, salvage), = q(fleet["url"], "SELECT status, stop_reason, salvage FROM synedre.launches")
    assert (status, reason) == ("succeeded", "success"), (reason, salvage, out)
    # its uid, no IS_SANDBOX, the worker's environment unreadable (in the sandbox's own PID
    # namespace the worker is not even visible), the state directory hidden but for its own part
    assert str(pwd.getpwnam(AGENT_USER).pw_uid) in out.split()
    assert "SANDBOX=unset" in out
    refused = {int(line.split()[1]) for line in out.splitlines() if line.startswith("ENV_REFUSED ")}
    assert not worker_pids & refused and "ENV_READ" not in out, out  # no pid of the worker seen at all
    listed = next(line for line in out.splitlines() if line.startswith("STATE:")).split()[1:]
    assert not {"pgdata", "launches", "attachments"} & set(listed) and "PGDATA_REFUSED" in out, out
    # no database: no coordinates, and the sandbox lets no socket through
    assert "PGUSER= PGHOST=" in out
    assert "could not create socket" in out and "UPDATE_RC=2" in out and "SELECT_RC=2" in out, out
    assert q(fleet["url"], "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("spawned",)]
    assert q(fleet["url"], "SELECT count(*) FROM synedre.audit_log WHERE event = 'actioned'") == [(0,)]
    # the agent's clone came back: its commit is on the trunk, made by root from the agent's branch
    assert git(fleet["repo"], "log", "-1", "--format=%s", "preprod").strip() == "agent commit"
    (contract,), = q(fleet["url"], "SELECT contract FROM synedre.launches")  # the one the agent wrote, as stored
    written = json.loads(CONTRACT)
    assert contract["ok"] is True and (contract["tenant"], contract["summary_md"]) == (written["tenant"],
                                                                                      written["summary_md"])


def test_a_sigkilled_worker_leaves_no_process_of_the_agent_user_behind(fleet, tmp_path):
    mid, = make_launchable(fleet["url"], tmp_path)
    api, worker = start(fleet, ScriptedModel([[bash("id -u")], Sleep(120)]))
    home_prefix = str(fleet["state"] / "agent")
    try:
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: len(api.main_requests()) >= 2, 90, "the agent to reach its silent turn")
        agents = agent_processes(home_prefix)
        assert agents, "no process of the agent user"
        assert all(p.uids().real == pwd.getpwnam(AGENT_USER).pw_uid for p in agents)
        worker.stop(signal.SIGKILL)
        stack.wait_for(lambda: not agent_processes(home_prefix), 30, "the agent to die with its worker")
    finally:
        worker.stop()
        api.stop()
