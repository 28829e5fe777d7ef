"""Launches end to end: real Celery spawn workers, the real `claude` CLI under a pty, a
scripted Messages API, a real git repository, PostgreSQL and Redis."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synedre.agent_tools import DEFAULT_TOOLS
from synedre.spawn import prompt
from tests.services import stack
from tests.services.claude_api import ScriptedModel, bash, start_claude_api
from tests.services.stack import q
from tests.spawn.conftest import git

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed "
                                 "(scripts/install-claude-cli)")]
SECRETS = ["S3cretPassw0rd-db", "sk-ant-api03-TESTSECRET0123456789abcdef", "envS3cretValue42",
           "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"]
CONTRACT = json.dumps({"ok": True, "tenant": "dupont", "routes_to_qa": ["/"], "commits": [],
                       "summary_md": "fixed", "draft_reply_for_user": None})


def agent_script(extra=()):
    return ScriptedModel([
        [bash("git status --short")],
        [bash(f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\"")],
        *extra,
        [bash("f=fix-$(basename $PWD).txt && pwd > $f && git add $f && git commit -qm 'agent commit'")],
    ])


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "preprod")
    git(path, "config", "user.name", "T")
    git(path, "config", "user.email", "t@x")
    (path / "README").write_text("site\n")
    git(path, "add", "README")
    git(path, "commit", "-qm", "init")
    return path


def make_launchable(url, tmp_path, n=1, intent="run", complexity="leger", tag="") -> list[int]:
    uid = int(time.time() * 1000) % 10**9
    return [stack.message_at(url, tmp_path, f"l{tag}{intent}{complexity}{i}", "materialized", complexity,
                             intent=intent, uid=uid + i, rationale="r") for i in range(n)]


@pytest.fixture
def launch_env(services, repo):
    """`make(model, **extra)`: a scripted API (stopped at teardown) and the environment of a
    spawn worker launching against it, `extra` added."""
    started = []

    def make(model, **extra):
        api = start_claude_api(model)
        started.append(api)
        return api, {**services["env"], "SYNEDRE_CLAUDE_BIN": shutil.which("claude"),
                     "SYNEDRE_ANTHROPIC_BASE_URL": api.url, "SYNEDRE_ANTHROPIC_API_KEY": SECRETS[1],
                     "SYNEDRE_WORKSPACE_REPO": str(repo), "SYNEDRE_IDLE_TIMEOUT_S": "60",
                     "SYNEDRE_LAUNCH_BUDGET_S": "120", **extra}
    yield make
    for api in started:
        api.stop()


def finished(url, n):
    return q(url, "SELECT count(*) FROM synedre.launches WHERE status <> 'running'")[0][0] >= n


def test_run_leger_and_run_plan_launch_once_commit_merge_and_record_everything(services, launch_env, repo, tmp_path):
    url = services["db"]
    leger, = make_launchable(url, tmp_path)
    plan, = make_launchable(url, tmp_path, complexity="plan")
    api, env = launch_env(agent_script([[bash(
        f"echo postgresql://app:{SECRETS[0]}@db/x; echo ANTHROPIC=$ANTHROPIC_API_KEY; "
        f"printf 'DB_PASSWORD={SECRETS[2]}\\n' > .env && cat .env && rm .env; "
        f"printf -- '-----BEGIN PRIVATE KEY-----\\n{SECRETS[3]}\\n-----END PRIVATE KEY-----\\n'")]]))
    worker = stack.celery_worker(env, services["logs"], queues="spawn", concurrency=3)
    try:
        from tasks.app import app
        for mid in (leger, plan):
            app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: finished(url, 2), 180, "two launches to finish", interval=0.5)
    finally:
        worker.stop()
        api.stop()
    rows = {r[0]: r for r in q(url, "SELECT message_id, status, system_prompt, max_turns, session_id, num_turns,"
                                     " cost_usd, contract, stop_reason, id, prompt_version FROM synedre.launches")}
    assert rows[leger][1:4] == ("succeeded", "lean", 40), rows[leger]
    assert rows[plan][1:4] == ("succeeded", "plan", None), rows[plan]
    for mid in (leger, plan):
        _, _, _, _, session, turns, cost, contract, stop, launch_id, version = rows[mid]
        assert version == prompt.VERSION  # the templates this launch was given (prompts/launch.*.<version>.txt)
        assert session and turns >= 4 and cost is not None and contract["ok"] is True and stop == "success"
        seqs = [s for s, in q(url, "SELECT seq FROM synedre.launch_events WHERE launch_id = %s ORDER BY seq",
                              launch_id)]
        assert seqs == list(range(len(seqs))) and len(seqs) > 5
        types = [t for t, in q(url, "SELECT event_type FROM synedre.launch_events WHERE launch_id = %s ORDER BY seq",
                               launch_id)]
        assert types[-1] == "result" and "assistant" in types
        assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("spawned",)]
        audits = [e for e, in q(url, "SELECT event FROM synedre.audit_log WHERE message_id = %s ORDER BY id", mid)]
        assert audits.count("spawn_started") == 1 and audits[-1] == "spawn_action_done"
    # the operator's view: `synedre tail` shows the run's tools, `synedre launches` the outcome
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "tail", str(leger), "--no-follow"], env=env,
                         capture_output=True, text=True, timeout=60, cwd=stack.ROOT, check=True).stdout
    assert "assistant Bash" in out and "result/success" in out
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "launches"], env={**env, "COLUMNS": "250"},
                         capture_output=True, text=True, timeout=60, cwd=stack.ROOT, check=True).stdout
    assert out.count("succeeded") == 2
    # the agent's commits were merged back into the pre-production branch
    assert git(repo, "log", "preprod", "--format=%s").count("agent commit") == 2, \
        q(url, "SELECT salvage FROM synedre.launches")
    # the right system prompts reached the model
    systems = [json.dumps(r.body.get("system")) for r in api.main_requests()]
    assert any("Plan mode" in s for s in systems) and any("atomic task" in s for s in systems)
    # each launch fenced its request with its own token, the one its system prompt names
    tokens = set()
    for r in api.main_requests():
        request = json.dumps(r.body["messages"][0])
        token, = set(re.findall(r"<<<COVER ([0-9a-f]{32})>>>", request))
        assert f"<<<END NAME {token}>>>" in json.dumps(r.body["system"])
        tokens.add(token)
    assert len(tokens) == 2
    # the tools each launch really got, and where its contract was: outside the repository
    for kind, tools_record, contract_path in q(url, "SELECT system_prompt, agent_tools, contract_path"
                                                    " FROM synedre.launches"):
        assert tools_record["allowed"] == list(DEFAULT_TOOLS[kind])
        assert "Bash(git stash:*)" in tools_record["disallowed"]
        assert contract_path.startswith(str(tmp_path / "state")) and not Path(contract_path).is_relative_to(repo)
    assert "contract" not in git(repo, "log", "preprod", "--name-only", "--format=")
    # (6) no secret in the events table, the NDJSON logs, or the worker's log
    dump = json.dumps([p for p, in q(url, "SELECT payload FROM synedre.launch_events")])
    ndjson = "".join((tmp_path / "state").rglob("events.ndjson").__next__().read_text() for _ in [0])
    results = json.dumps([r.body for r in api.main_requests()])
    api_key = SECRETS[1]  # the CLI's own key: the sandbox unsets it for the agent's commands
    assert api_key not in results and "ANTHROPIC=\\n" in results  # printed empty
    for secret in SECRETS:
        assert secret == api_key or secret in results  # the agent really printed it...
        assert secret not in dump and secret not in ndjson and secret not in worker.output()  # ...nowhere kept
    assert "[REDACTED" in dump


def test_twenty_concurrent_attempts_start_exactly_one_agent(services, launch_env, tmp_path):
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    api, env = launch_env(agent_script())
    workers = stack.celery_workers(env, services["logs"], ("spawn", 3), ("spawn", 3))
    try:
        from tasks.app import app
        for _ in range(17):
            app.send_task("synedre.spawn", args=[mid])
        subprocess.run([sys.executable, "-m", "celery", "-A", "tasks", "call", "synedre.spawn", "--args",
                        json.dumps([mid])], env=env, check=True, timeout=60, cwd=stack.ROOT, capture_output=True)
        # a redelivery: the same message published again by hand, as the broker would
        for _ in range(2):
            app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: finished(url, 1), 180, "the launch to finish", interval=0.5)
        stack.wait_for(lambda: all(services["redis"].llen(qn) == 0 for qn in ("spawn",))
                       and services["redis"].hlen("unacked") == 0, 60, "all 20 attempts handled", interval=0.5)
    finally:
        stack.stop_all(workers)
        api.stop()
    first_requests = [r for r in api.main_requests() if not any(
        m.get("role") == "assistant" for m in r.body.get("messages", []))]
    sessions = {r.headers.get("x-claude-code-session-id") for r in first_requests}
    assert len(q(url, "SELECT id FROM synedre.launches")) == 1
    assert len(first_requests) == 1, sessions  # one agent process ever talked to the model
    assert q(url, "SELECT count(*) FROM synedre.audit_log WHERE event = 'spawn_started'")[0][0] == 1
    # every attempt ran to its end: the other 19 found the lock held or the message claimed
    # (which of the two depends on timing; the lock itself is tested in tests/spawn/test_locks.py)
    ran = sum(len(re.findall(r"Task synedre\.spawn\[[^]]+\] succeeded", w.output())) for w in workers)
    assert ran == 20, ran


def test_pause_stops_new_launches_and_survives_a_worker_restart(services, launch_env, tmp_path):
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    api, env = launch_env(agent_script())
    cli = [sys.executable, "-m", "synedre.cli", "spawn"]
    try:
        subprocess.run([*cli, "pause", "--reason", "test"], env=env, check=True, timeout=60, cwd=stack.ROOT)
        worker = stack.celery_worker(env, services["logs"], queues="spawn", concurrency=3)
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: "spawn_disabled" in worker.output(), 60, "the paused launch to be refused")
        worker.stop()
        worker = stack.celery_worker(env, services["logs"], queues="spawn", concurrency=3)  # a restart
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: worker.output().count("spawn_disabled") >= 1, 60, "refused again after restart")
        assert q(url, "SELECT count(*) FROM synedre.launches")[0][0] == 0 and api.main_requests() == []
        status = json.loads(subprocess.run([*cli, "status"], env=env, check=True, timeout=60, cwd=stack.ROOT,
                                           capture_output=True, text=True).stdout)
        assert status["disabled_reason"]
        subprocess.run([*cli, "resume"], env=env, check=True, timeout=60, cwd=stack.ROOT)
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: finished(url, 1), 180, "the launch after resume", interval=0.5)
        worker.stop()
    finally:
        api.stop()
    assert q(url, "SELECT status FROM synedre.launches") == [("succeeded",)]


def agents_running(marker: str) -> int:
    """Agent CLIs alive now. A child caught between fork and exec still shows its parent's
    command line, so only processes whose parent is not itself an agent count."""
    import psutil
    agents = {}
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmd = p.info["cmdline"] or []
        if "stream-json" in cmd and any(marker in a for a in cmd):
            agents[p.pid] = p.info["ppid"]
    return sum(1 for ppid in agents.values() if ppid not in agents)


def test_ten_messages_on_two_workers_never_run_more_than_three_agents(services, launch_env, tmp_path):
    import threading

    from tests.services.claude_api import Sleep
    url = services["db"]
    ids = make_launchable(url, tmp_path, n=10)
    api, env = launch_env(agent_script([Sleep(1.5)]))
    env = {**env, "SYNEDRE_SPAWN_SLOT_RETRY_S": "1"}
    workers = stack.celery_workers(env, services["logs"], ("spawn", 3), ("spawn", 3))
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], agents_running(str(tmp_path)))
            time.sleep(0.25)  # each agent lives 1.5 s at least; a look at every process costs ~15-40 ms
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        from tasks.app import app
        for mid in ids:
            app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: finished(url, 10), 200, "ten launches", interval=0.5)
    finally:
        done.set()
        sampler.join()
        stack.stop_all(workers)
        api.stop()
    # a second, independent measure: the launches' own start/end times (inside the slot)
    spans = q(url, "SELECT started_at, ended_at FROM synedre.launches")
    overlap = max(sum(1 for s2, e2 in spans if s2 <= s1 < e2) for s1, _ in spans)
    print(f"peak concurrent agents: {peak[0]} (processes), {overlap} (launch records)")
    assert 2 <= peak[0] <= 3 and overlap <= 3
    assert q(url, "SELECT count(*) FROM synedre.launches WHERE status = 'succeeded'")[0][0] == 10


def test_idle_and_hard_timeouts_stop_the_agent_with_124_or_125_and_salvage(services, launch_env, tmp_path):
    from tests.services.claude_api import Sleep
    url = services["db"]
    idle_mid, = make_launchable(url, tmp_path)
    commit = [bash("f=early-$(basename $PWD).txt && pwd > $f && git add $f && git commit -qm 'early commit'")]
    api, env = launch_env(ScriptedModel([commit, [bash(f"printf '%s' '{CONTRACT[:40]}'"
                                                       " > \"$SYNEDRE_CONTRACT_PATH\"")], Sleep(30)]))
    # without the automatic resume (tests/spawn/test_resume.py): the stop and its salvage alone
    stack.spawn_one({**env, "SYNEDRE_IDLE_TIMEOUT_S": "3", "SYNEDRE_AUTO_RESUME": "false"}, services["logs"],
                    idle_mid, lambda: finished(url, 1), 90, "the idle launch to stop")
    (exit_code, stop, salvage, status), = q(url, "SELECT exit_code, stop_reason, salvage, status FROM synedre.launches")
    assert (exit_code, stop, status) == (125, "idle", "failed")
    assert any("early commit" in c for c in salvage["commits"]) and salvage["resumable"] is True
    assert salvage["contract"].startswith('{"ok": true')  # the partial file, read from the worktree
    assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", idle_mid) == [("spawn_failed",)]

    hard_mid, = make_launchable(url, tmp_path, intent="question")
    busy = [step for i in range(30) for step in ([bash(f"echo turn {i}")], Sleep(0.5))]  # never idle
    api, env = launch_env(ScriptedModel(busy))
    stack.spawn_one({**env, "SYNEDRE_HARD_TIMEOUT_S": "4"}, services["logs"], hard_mid, lambda: finished(url, 2), 90,
                    "the hard-limited launch to stop")
    assert q(url, "SELECT exit_code, stop_reason FROM synedre.launches WHERE message_id = %s", hard_mid) == \
        [(124, "hard")]
    assert agents_running(str(tmp_path)) == 0


def test_sigkill_of_the_worker_leaves_no_agent_and_the_message_is_never_launched_twice(
        services, launch_env, tmp_path):
    import signal

    from synedre.spawn.locks import MessageLock
    from synedre.sweep import fail_lost_launches
    from tests.services.claude_api import Sleep
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    api, env = launch_env(ScriptedModel([[bash("git status --short")], Sleep(120)]))
    env["SYNEDRE_SPAWN_LOCK_TTL_S"] = "15"  # the dead launch's lock expires sooner than the default 60 s
    worker = stack.celery_worker(env, services["logs"], queues="spawn")
    try:
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: q(url, "SELECT session_id FROM synedre.launches")[:1] and
                       q(url, "SELECT session_id FROM synedre.launches")[0][0], 60, "the agent to start")
        stack.wait_for(lambda: agents_running(str(tmp_path)) == 1, 30, "the agent process")
        stack.wait_for(lambda: len(api.main_requests()) >= 2, 30, "the agent to reach its silent turn")
        worker.stop(signal.SIGKILL)  # the whole worker, main process and pool, at once
        stack.wait_for(lambda: agents_running(str(tmp_path)) == 0, 30, "the agent to die with its worker")
        r = services["redis"]
        stack.wait_for(lambda: MessageLock(r, str(mid)).holder() is None, 90, "the dead launch's lock to expire",
                       interval=1)
        assert fail_lost_launches(lambda m: MessageLock(r, str(m)).holder() is not None) == [mid]
        worker = stack.celery_worker(env, services["logs"], queues="spawn")
        app.send_task("synedre.spawn", args=[mid])
        # (the killed worker's own task stays unacknowledged until the visibility timeout)
        stack.wait_for(lambda: "synedre.spawn[" in worker.output() and " succeeded in " in worker.output(),
                       60, "the second attempt handled")
    finally:
        worker.stop()
        api.stop()
    assert q(url, "SELECT count(*), min(status), min(stop_reason) FROM synedre.launches") == [
        (1, "failed", "worker_lost")]
    assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("spawn_failed",)]
    sessions = {r.headers.get("x-claude-code-session-id") for r in api.main_requests()}
    assert len(sessions) == 1


def launch_one(services, launch_env, tmp_path, model, tag=""):
    """One message, launched on its own worker against `model`: its id, launch row and API."""
    url = services["db"]
    mid, = make_launchable(url, tmp_path, tag=tag)
    api, env = launch_env(model)
    worker = stack.celery_worker(env, services["logs"], queues="spawn")
    try:
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: q(url, "SELECT 1 FROM synedre.launches WHERE message_id = %s AND status <> 'running'",
                                 mid), 120, "the launch to finish", interval=0.5)
        # the row is written before the clone is closed: stopping the worker in between
        # would leave what the task had still to undo (the branch fetched back for it)
        stack.wait_for(lambda: re.search(r"Task synedre\.spawn\[[^]]+\] (succeeded|raised|failed)", worker.output()),
                       30, "the spawn task to end", interval=0.2)
    finally:
        worker.stop()
        api.stop()
    (row,) = q(url, "SELECT status, stop_reason, branch, salvage, contract_path, id FROM synedre.launches"
                    " WHERE message_id = %s", mid)
    return mid, row, api


def test_a_run_with_an_invalid_contract_leaves_the_trunk_as_it_was_and_its_commits_on_its_branch(
        services, launch_env, repo, tmp_path):
    trunk = git(repo, "rev-parse", "preprod").strip()
    invalid = json.dumps({"ok": "yes", "tenant": "dupont", "commits": [], "summary_md": "fixed"})
    model = ScriptedModel([[bash(f"printf '%s' '{invalid}' > \"$SYNEDRE_CONTRACT_PATH\"")],
                           [bash("echo fix > fix.txt && git add fix.txt && git commit -qm 'unverified fix'")]])

    mid, (status, reason, branch, salvage, _, _), _ = launch_one(services, launch_env, tmp_path, model)

    assert (status, reason) == ("failed", "invalid_contract")
    assert git(repo, "rev-parse", "preprod").strip() == trunk  # the trunk did not move...
    assert git(repo, "status", "--porcelain") == "" and not (repo / "fix.txt").exists()
    tip = git(repo, "rev-parse", branch).strip()  # ...the commit is on the launch's branch...
    assert git(repo, "log", "-1", "--format=%s", branch).strip() == "unverified fix"
    assert salvage["branch"] == branch and [c.split(" ", 1)[0] for c in salvage["commits"]] == [tip]
    assert salvage["merge"] is None and salvage["contract_errors"]  # ...named in the launch record
    assert q(services["db"], "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == \
        [("spawn_failed",)]


def test_a_run_without_a_contract_right_after_a_successful_run_of_the_same_repository_ends_invalid_contract(
        services, launch_env, repo, tmp_path):
    # the first agent commits with `git add -A`, which once swept its contract onto the trunk
    first = ScriptedModel([[bash(f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\"")],
                           [bash("echo one > one.txt && git add -A && git commit -qm 'first agent'")]])
    _, (status, _, _, _, first_contract, _), _ = launch_one(services, launch_env, tmp_path, first, tag="first")
    assert status == "succeeded"
    assert git(repo, "log", "-1", "--format=%s", "preprod").strip() == "first agent"
    assert git(repo, "ls-tree", "-r", "--name-only", "preprod").split() == ["README", "one.txt"]
    trunk = git(repo, "rev-parse", "preprod").strip()

    second = ScriptedModel([[bash("echo two > two.txt && git add -A && git commit -qm 'second agent'")]])
    _, (status, reason, branch, salvage, contract_path, _), _ = launch_one(services, launch_env, tmp_path, second,
                                                                          tag="second")

    assert (status, reason) == ("failed", "invalid_contract")
    assert contract_path != first_contract and not os.path.exists(contract_path)
    assert any("missing" in e for e in salvage["contract_errors"])
    assert git(repo, "rev-parse", "preprod").strip() == trunk and git(repo, "rev-parse", branch) != trunk


def test_a_run_that_commits_a_contract_file_is_refused_and_stays_off_the_trunk(
        services, launch_env, repo, tmp_path):
    trunk = git(repo, "rev-parse", "preprod").strip()
    model = ScriptedModel([[bash(f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\" && mkdir -p .synedre"
                                 " && cp \"$SYNEDRE_CONTRACT_PATH\" .synedre/contract.json")],
                           [bash("git add -A && git commit -qm 'fix with its contract'")]])

    _, (status, reason, branch, salvage, _, _), _ = launch_one(services, launch_env, tmp_path, model)

    assert (status, reason) == ("failed", "contract_committed")
    assert salvage["contract_committed"] == [".synedre/contract.json"]
    assert git(repo, "rev-parse", "preprod").strip() == trunk
    assert ".synedre/contract.json" in git(repo, "ls-tree", "-r", "--name-only", branch)


def test_a_finished_launch_keeps_every_file_it_created_private(services, launch_env, repo, tmp_path):
    # the agent lists its worktree while it exists (a clean one is removed at the end)
    listing = "find \"$PWD\" -path \"$PWD/.git\" -prune -o -printf '%m %y %p\\n'"
    model = ScriptedModel([[bash(f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\"")],
                           [bash("mkdir -p src && echo x > src/new.py && git add src"
                                 " && git commit -qm 'agent commit'")],
                           [bash(listing)]])

    _, (status, _, _, _, contract_path, launch_id), api = launch_one(services, launch_env, tmp_path, model)

    assert status == "succeeded"
    base = tmp_path / "state" / "launches" / str(launch_id)  # the fleet's: the stream
    mine = tmp_path / "state" / "agent" / str(launch_id)  # the agent's home, contract, settings
    walked = [base, *base.rglob("*"), mine, *mine.rglob("*")]
    names = {p.relative_to(tmp_path / "state").as_posix() for p in walked}
    assert {f"launches/{launch_id}/events.ndjson", f"agent/{launch_id}/home/tmp",
            f"agent/{launch_id}/claude-settings.json", f"agent/{launch_id}/out/{Path(contract_path).name}"} <= names
    bad = []
    for p in [*walked, tmp_path / "state" / "agent" / "clones" / repo.name]:
        if p.is_symlink():
            continue
        mode = p.stat().st_mode & 0o777
        # nothing for other users but traversal; the settings readable by the agent's group alone
        allowed = (0o700, 0o711) if p.is_dir() else (0o640,) if p.name == "claude-settings.json" else (0o600,)
        if mode not in allowed:
            bad.append(f"{mode:o} {p}")
    assert bad == []
    # (with --max-budget-usd the CLI ends each request with a system message: the listing is
    # in the last *user* message, the result of step 2)
    last = [r for r in api.main_requests() if r.step == 3][0]
    results, = [m["content"] for m in last.body["messages"] if m["role"] == "user"][-1:]
    output = "\n".join(b["content"] for b in results if b.get("type") == "tool_result")
    listed = [line.split(" ", 2) for line in output.splitlines() if line[:1].isdigit()]
    assert any(p.endswith("/src/new.py") for _, _, p in listed) and len(listed) >= 4
    # the sandbox's own mount points (/dev/null, its .claude guard) are not the agent's files
    listed = [(m, kind, p) for m, kind, p in listed if kind != "c" and "/.claude/" not in p]
    assert [f"{m} {p}" for m, kind, p in listed if m != ("700" if kind == "d" else "600")] == []
