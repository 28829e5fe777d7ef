"""The sandbox is the boundary (issue 14, SPEC §8 Sandbox): what the agent runs, written the
indirect way, cannot reach the client repository, the network or a secret. Each test runs the
real `claude` CLI (its own bubblewrap sandbox) against the scripted Messages API, on a real git
repository; the launches go through a real spawn worker on the default configuration."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis

from synedre import agent_tools as tools
from synedre.redact import Redactor
from synedre.spawn import launcher, sandbox, workspace
from tests.services import stack
from tests.services.claude_api import ScriptedModel, bash, start_claude_api, text, write
from tests.spawn.conftest import git
from tests.spawn.test_claude_cli_offline import cli_env
from tests.spawn.test_launch_e2e import CONTRACT, launch_env, launch_one, make_launchable, q, repo  # noqa: F401

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed"),
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed "
                                 "(scripts/system-deps)")]


class Listener:
    """A local HTTP server that counts every request: nothing of the agent's may reach it."""

    def __init__(self):
        hits = self.hits = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - stdlib
                hits.append(self.path)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.stop()


def trunk_state(trunk: Path) -> dict[str, object]:
    """Everything of the client repository the agent must leave as it was."""
    hooks = trunk / ".git" / "hooks"
    return {"refs": git(trunk, "for-each-ref", "--format=%(refname) %(objectname)"),
            "stash": git(trunk, "stash", "list"), "head": git(trunk, "rev-parse", "HEAD"),
            "status": git(trunk, "status", "--porcelain"), "config": (trunk / ".git" / "config").read_text(),
            "hooks": sorted((p.name, p.read_bytes()) for p in hooks.iterdir())}


def indirect_commands(trunk: Path, port: int, remote: Path, marker: Path) -> list[str]:
    """The issue's list: each goes around a deny rule that matches a command's first word."""
    hook = f"printf '#!/bin/sh\\ntouch {marker}\\n' > {{}} && chmod +x {{}}"
    return [
        "sh -c 'git stash'",
        f"sh -c 'git -C {trunk} stash'",
        "python3 -c \"import subprocess; subprocess.run(['git','push','origin','HEAD:main'], check=True)\"",
        f"python3 -c \"import subprocess; subprocess.run(['git','-C','{trunk}','push','origin','HEAD:main'],"
        " check=True)\"",
        f"python3 -c \"import subprocess; subprocess.run(['git','push','{remote}','HEAD:main'], check=True)\"",
        f"git -C {trunk} commit --allow-empty -m x",
        f"python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/x?secret', timeout=5)\"",
        hook.format(f"{trunk}/.git/hooks/post-merge", f"{trunk}/.git/hooks/post-merge"),
        hook.format(".git/hooks/reference-transaction", ".git/hooks/reference-transaction"),
    ]


def assert_confined(trunk: Path, before: dict, remote: Path, listener: Listener, marker: Path, outside: Path):
    assert trunk_state(trunk) == before  # refs, stash, trunk, status, config and hooks unchanged
    assert git(remote, "for-each-ref") == ""  # nothing pushed
    assert listener.hits == []  # no request reached the local server
    assert not marker.exists() and not outside.exists()


def assert_each_refused(commands: list[str], results: list[tuple[str, bool]]) -> None:
    """Every command but the stash of the agent's own clean clone failed, visibly."""
    ran = dict(zip(commands, results, strict=True))
    assert ran.pop("sh -c 'git stash'") == ("No local changes to save", False)  # its own clone: harmless
    assert [c for c, (_, is_error) in ran.items() if not is_error] == []


def tool_results(events: list[dict]) -> list[tuple[str, bool]]:
    """(content, is_error) of each tool result the agent got, in order, from stored events."""
    out = []
    for e in events:
        if e.get("type") == "user":
            for b in e.get("message", {}).get("content") or []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    content = b.get("content")
                    out.append((content if isinstance(content, str) else json.dumps(content),
                                bool(b.get("is_error"))))
    return out


@pytest.fixture
def remote(repo, tmp_path):  # noqa: F811
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    return bare


def test_on_the_default_configuration_no_indirect_command_reaches_the_trunk_the_network_or_a_hook(
        services, launch_env, repo, remote, listener, tmp_path):  # noqa: F811
    (repo / "README").write_text("work in progress a stash would hide\n")  # something to stash
    marker, outside = tmp_path / "hook-ran", tmp_path / "outside.txt"
    before = trunk_state(repo)
    commands = indirect_commands(repo, listener.port, remote, marker)
    model = ScriptedModel([[bash(f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\"")], [bash("id -un")],
                           *([bash(c)] for c in commands),
                           [write(str(repo / ".git" / "hooks" / "post-checkout"), f"#!/bin/sh\ntouch {marker}\n")],
                           [write(str(outside), "x")], [text("done")]])

    mid, (status, reason, branch, _, _, launch_id), api = launch_one(services, launch_env, tmp_path, model)

    assert_confined(repo, before, remote, listener, marker, outside)
    url = services["db"]
    events = [p for p, in q(url, "SELECT payload FROM synedre.launch_events WHERE launch_id = %s ORDER BY seq",
                            launch_id)]
    results = tool_results(events)
    assert results[1] == ("synedre-agent", False)  # the default: not root
    # every indirect command ran and failed, and says so in the launch's events
    assert len(results) == 2 + len(commands) + 2
    assert_each_refused(commands, results[2:2 + len(commands)])
    # the Write tool outside the workspace: refused by the path rules, reported as denials
    result = next(e for e in events if e.get("type") == "result")
    denied = [d["tool_input"]["file_path"] for d in result["permission_denials"]]
    assert denied == [str(repo / ".git" / "hooks" / "post-checkout"), str(outside)]
    assert (status, reason) == ("failed", "permission_denials")
    (recorded,) = q(url, "SELECT sandbox FROM synedre.launches WHERE id = %s", launch_id)[0]
    assert recorded["sandbox"]["enabled"] and recorded["sandbox"]["failIfUnavailable"]
    assert recorded["sandbox"]["allowUnsandboxedCommands"] is False
    assert recorded["sandbox"]["network"]["allowedDomains"] == []
    assert recorded["permissions"]["blockWritesOutsideWorkingDirectories"] is True
    # the model's requests went through, the agent's never left the sandbox
    assert len(api.main_requests()) >= len(commands)


def run_on_worker(services, launch_env, tmp_path, model, until=None, **overrides):  # noqa: F811
    """One message launched on its own spawn worker with settings overridden: (mid, api).
    `until(mid)`: what else to wait for before the worker is stopped (its task's hand-off)."""
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    api, env = launch_env(model)
    worker = stack.celery_worker({**env, **overrides}, services["logs"], queues="spawn")
    try:
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: q(url, "SELECT 1 FROM synedre.launches WHERE message_id = %s AND status <> 'running'",
                                 mid), 120, "the launch to end", interval=0.5)
        if until is not None:
            stack.wait_for(lambda: until(mid), 30, "the launch's hand-off", interval=0.2)
    finally:
        worker.stop()
        api.stop()
    return mid, api


def test_a_workspace_that_cannot_be_made_fails_the_launch_audited_and_never_falls_back_to_the_trunk(
        services, launch_env, repo, tmp_path):  # noqa: F811
    before = trunk_state(repo)
    mid, api = run_on_worker(services, launch_env, tmp_path, ScriptedModel([[text("never asked")]]),
                             SYNEDRE_WORKSPACE_BASE_BRANCH="no-such-branch")
    url = services["db"]
    (status, reason, salvage), = q(url, "SELECT status, stop_reason, salvage FROM synedre.launches")
    assert (status, reason) == ("failed", "workspace_unavailable") and "no-such-branch" in salvage["error"]
    assert api.requests == [] and trunk_state(repo) == before
    assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("spawn_failed",)]
    assert ("workspace_unavailable",) in q(url, "SELECT event FROM synedre.audit_log WHERE message_id = %s", mid)


def test_with_bwrap_missing_from_the_path_the_launch_ends_sandbox_unavailable_and_no_agent_starts(
        services, launch_env, repo, tmp_path):  # noqa: F811
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name != "bwrap" and not (bin_dir / name).exists():
                    (bin_dir / name).symlink_to(Path(d) / name)
    started = tmp_path / "agent-started"
    fake_claude = tmp_path / "claude-wrapper"
    fake_claude.write_text(f"#!/bin/sh\ntouch {started}\nexec {shutil.which('claude')} \"$@\"\n")
    fake_claude.chmod(0o755)
    mid, api = run_on_worker(services, launch_env, tmp_path, ScriptedModel([[text("never asked")]]),
                             PATH=str(bin_dir), SYNEDRE_CLAUDE_BIN=str(fake_claude))
    url = services["db"]
    (status, reason, salvage), = q(url, "SELECT status, stop_reason, salvage FROM synedre.launches")
    assert (status, reason) == ("sandbox_unavailable", "sandbox_unavailable")
    assert "bwrap" in salvage["error"]
    assert not started.exists() and api.requests == []  # no agent process, no model call
    assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("spawn_failed",)]
    assert ("sandbox_unavailable",) in q(url, "SELECT event FROM synedre.audit_log WHERE message_id = %s", mid)


def test_a_successful_run_whose_merge_fails_ends_merge_failed_with_an_alert_and_the_trunk_unchanged(
        services, launch_env, repo, tmp_path):  # noqa: F811
    (repo / "README").write_text("the founder's own uncommitted edit\n")  # a trunk the merge must not touch
    before = trunk_state(repo)
    model = ScriptedModel([[bash(f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\"")],
                           [bash("echo fix > fix.txt && git add -A && git commit -qm 'agent fix'")]])
    r = redis.Redis.from_url(stack.TEST_REDIS_URL)

    def alert_queued(mid: int) -> bool:  # the founder's alert is on its way (no recap worker runs here)
        return any(m["headers"]["task"] == "synedre.alert" and m["headers"]["argsrepr"] == f"[{mid}]"
                   for m in map(json.loads, r.lrange("recap", 0, -1)))

    mid, _ = run_on_worker(services, launch_env, tmp_path, model, until=alert_queued)
    (status, reason, branch, salvage), = q(services["db"], "SELECT status, stop_reason, branch, salvage"
                                                            " FROM synedre.launches WHERE message_id = %s", mid)
    assert (status, reason) == ("merge_failed", "merge_failed")
    assert salvage["merge"] == "trunk has uncommitted changes" and len(salvage["commits"]) == 1
    assert trunk_state(repo) == {**before, "refs": trunk_state(repo)["refs"]}  # the trunk's content as it was
    assert git(repo, "rev-parse", "preprod") == before["head"]  # the trunk did not move...
    assert git(repo, "log", "-1", "--format=%s", branch).strip() == "agent fix"  # ...the work is on its branch
    url = services["db"]
    assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("merge_failed",)]
    assert ("merge_failed",) in q(url, "SELECT event FROM synedre.audit_log WHERE message_id = %s", mid)
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "launches"], env={**services["env"], "COLUMNS": "200"},
                         capture_output=True, text=True, timeout=60, cwd=stack.ROOT, check=True).stdout
    assert "merge_failed" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="creating the non-root fleet user needs root")
def test_as_a_non_root_fleet_the_sandbox_alone_keeps_the_agent_off_its_own_trunk_and_the_network(
        repo, tmp_path, listener, monkeypatch):  # noqa: F811
    """A fleet that is not root runs the agent as itself: the trunk is then writable by the
    agent's user, and only the sandbox stands between them."""
    name = "synedre-test-fleet"
    if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", name], check=True, timeout=30)
    user = launcher.RunAs.lookup(name)
    top = tmp_path / "fleet"
    top.mkdir()
    for p in [tmp_path, *tmp_path.parents]:
        p.chmod(p.stat().st_mode | 0o001)  # traversable, as a fleet user's own home would be
    shutil.move(str(repo), top / "repo")
    trunk = top / "repo"
    bare = top / "remote.git"
    git(top, "init", "-q", "--bare", str(bare))
    git(trunk, "remote", "add", "origin", str(bare))
    (trunk / "README").write_text("work in progress\n")
    workspace.chown_tree(top, user)
    for k, v in {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}.items():
        monkeypatch.setenv(k, v)  # the test (root) reads the fleet user's repositories
    before = trunk_state(trunk)
    marker, outside = top / "hook-ran", top / "outside.txt"
    home, out = top / "home", top / "out"
    ws = top / "ws"
    for d in (home, home / "tmp", out):
        workspace.agent_dir(d, user)
    subprocess.run(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "git", "clone",
                    "-q", str(trunk), str(ws)], check=True, timeout=60, env={"PATH": os.environ["PATH"],
                                                                             "HOME": str(home)})
    settings_file = sandbox.write_settings(top / sandbox.SETTINGS_NAME, sandbox.settings(
        workspace=ws, contract_dir=out, launch_dir=top, repo=trunk, fleet=[tmp_path / "state"], domains=[]), user)
    commands = indirect_commands(trunk, listener.port, bare, marker)
    api = start_claude_api(ScriptedModel([*([bash(c)] for c in commands),
                                          [write(str(trunk / ".git" / "hooks" / "post-checkout"), "x")],
                                          [write(str(outside), "x")], [text("done")]]))
    try:
        lane = tools.policy("lean")
        argv = launcher.build_argv(shutil.which("claude") or "claude", add_dir=[ws, out], settings=settings_file,
                                 prompt="p", system_prompt="S", model="sonnet", allowed_tools=lane.allowed,
                                 disallowed_tools=lane.disallowed)
        env = {k: v for k, v in cli_env(api.url, home).items() if k != "IS_SANDBOX"}  # not root: not needed
        events: list[dict] = []
        outcome = launcher.run(argv, cwd=ws, env=env, limits=launcher.Limits(budget_s=180), redactor=Redactor(),
                             on_events=lambda b: events.extend(p for _, p in b), ndjson_path=None, run_as=user)
    finally:
        api.stop()
    assert outcome.result is not None, outcome
    assert_confined(trunk, before, bare, listener, marker, outside)
    results = tool_results(events)
    assert len(results) == len(commands) + 2, results
    assert_each_refused(commands, results[:len(commands)])
    assert "Read-only file system" in dict(zip(commands, results, strict=False))[
        f"git -C {trunk} commit --allow-empty -m x"][0]  # the sandbox's refusal, not the file modes
    assert [d["tool_input"]["file_path"] for d in outcome.result.permission_denials] == [
        str(trunk / ".git" / "hooks" / "post-checkout"), str(outside)]


def test_synedre_status_says_who_the_agent_runs_as_and_warns_about_the_root_opt_out(tmp_path, monkeypatch):
    from synedre import health
    from synedre.config import Settings

    default = health.check_agent_sandbox(Settings(state_dir=tmp_path))
    assert default.ok and "sandboxed" in default.detail
    if os.geteuid() == 0:
        assert "runs as synedre-agent" in default.detail
        opted_out = health.check_agent_sandbox(Settings(state_dir=tmp_path, agent_as_root=True))
        assert not opted_out.ok and "WARNING SYNEDRE_AGENT_AS_ROOT" in opted_out.detail
        missing = health.check_agent_sandbox(Settings(state_dir=tmp_path, agent_user="no-such-user"))
        assert not missing.ok and "no-such-user" in missing.detail
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap, no socat
    broken = health.check_agent_sandbox(Settings(state_dir=tmp_path))
    assert not broken.ok and "sandbox unavailable" in broken.detail and "bwrap" in broken.detail
