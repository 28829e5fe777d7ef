"""synedre.spawn.launcher against the real `claude` CLI and the scripted local API.

Each test runs the pinned CLI under a pty in a temporary git repository; the scripted
model (tests/services/claude_api.py) makes it run real Bash / Write tools there.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from synedre.redact import Redactor
from synedre.spawn.launcher import (
    HARD_EXIT,
    IDLE_EXIT,
    MAX_ARG_BYTES,
    Limits,
    RunOutcome,
    build_argv,
    run,
)
from synedre.spawn.reassembly import UnparsedEvent
from synedre.spawn.stream import AssistantMessage, ResultMessage, SystemInit, UserMessage
from tests.services.claude_api import ClaudeAPI, ScriptedModel, Sleep, bash, text, write
from tests.spawn.conftest import git
from tests.spawn.test_claude_cli_offline import CLAUDE, COMMIT, CONTRACT, cli_env, commit_contract

needs_claude = pytest.mark.skipif(
    CLAUDE is None, reason="the `claude` CLI is not installed (run scripts/install-claude-cli)")

SYSTEM = "You are a scripted test agent. Write contract.json early; commit with git."
PROMPT = "Handle the scripted task."
# Started in the background by a Bash tool: a descendant of the CLI that must die with it.
# (The CLI refuses `sleep N` in a command, hence tail.) Its group is recorded to show it
# is not the CLI's.
BACKGROUND = "tail -f /dev/null >/dev/null 2>&1 & echo $! > bg.pid; ps -o pgid= -p $! > bg.pgid"


class Collector:
    """The persistence callback: keeps every batch, in order, as a database would."""

    def __init__(self, on_pair=None):
        self.batches: list[list[tuple[Any, dict]]] = []
        self.on_pair = on_pair

    def __call__(self, batch):
        self.batches.append(batch)
        for pair in batch:
            if self.on_pair:
                self.on_pair(*pair)

    @property
    def pairs(self) -> list[tuple[Any, dict]]:
        return [p for b in self.batches for p in b]


def launch(repo: Path, api: ClaudeAPI, limits: Limits, *, redactor: Redactor | None = None,
           collector: Collector | None = None, stop: threading.Event | None = None,
           sessions: list[str] | None = None) -> tuple[RunOutcome, Collector, Path]:
    home = repo.parent / "home"
    home.mkdir(exist_ok=True)
    env = {**cli_env(api.url, home), "CLAUDE_CODE_MAX_RETRIES": "0"}
    collector = collector or Collector()
    ndjson = repo.parent / "launch.ndjson"
    argv = build_argv(CLAUDE, add_dir=repo, prompt=PROMPT, system_prompt=SYSTEM, model="sonnet",
                      max_turns=400)
    outcome = run(argv, cwd=repo, env=env, limits=limits, redactor=redactor or Redactor(),
                  on_events=collector, ndjson_path=ndjson,
                  on_session=sessions.append if sessions is not None else None, stop=stop)
    return outcome, collector, ndjson


def assert_group_gone(outcome: RunOutcome, repo: Path | None = None) -> None:
    pgid = outcome.pgid
    assert pgid
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    left = []
    for p in psutil.process_iter(["pid", "name"]):
        try:
            if os.getpgid(p.pid) == pgid:
                left.append(p.info)
        except ProcessLookupError:
            pass
    assert left == [], left
    if repo is not None:  # the backgrounded descendant, in a session of its own
        bg = int((repo / "bg.pid").read_text())
        assert int((repo / "bg.pgid").read_text()) != pgid
        assert not _running(bg), f"background process {bg} survived"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ndjson_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@needs_claude
@pytest.mark.timeout(120)
def test_scripted_run_ends_on_result_and_persists_every_event_in_order(repo, api_factory):
    contract = repo / "contract.json"
    api = api_factory(commit_contract(contract))
    sessions: list[str] = []

    outcome, collector, ndjson = launch(repo, api, Limits(), sessions=sessions)

    assert (outcome.stop_reason, outcome.exit_code, outcome.error) == ("result", 0, None), outcome
    assert isinstance(outcome.result, ResultMessage)
    assert outcome.result.subtype == "success" and outcome.result.is_error is False
    assert outcome.result.num_turns == 4
    assert outcome.session_id and sessions == [outcome.session_id]
    assert outcome.result.session_id == outcome.session_id

    pairs = collector.pairs
    assert len(pairs) == outcome.events > 0
    # seq = position across batches: the NDJSON file, written by the reader, is the reference order.
    lines = ndjson_lines(ndjson)
    assert [d for _, d in pairs] == lines
    assert all(e.raw is d for e, d in pairs)  # the event is parsed from the persisted (redacted) dict
    assert isinstance(pairs[0][0], SystemInit)
    assert isinstance(pairs[-1][0], ResultMessage)
    tools = [e.tool_name for e, _ in pairs if isinstance(e, AssistantMessage) and e.tool_name]
    assert tools == ["Bash", "Write", "Bash"]
    assert not [e for e, _ in pairs if isinstance(e, UnparsedEvent)]

    assert json.loads(contract.read_text()) == CONTRACT
    assert git(repo, "log", "-1", "--format=%s").strip() == "agent commit"
    assert_group_gone(outcome)
    print(f"\n{outcome.events} events in {len(collector.batches)} batches, {outcome.duration_s:.2f}s, "
          f"skipped lines {outcome.skipped_lines}")


@needs_claude
@pytest.mark.timeout(120)
def test_a_background_process_left_by_a_tool_dies_with_a_finished_run(repo, api_factory):
    api = api_factory(ScriptedModel([[bash(BACKGROUND)], [text("left it running")]]))

    outcome, _, _ = launch(repo, api, Limits())

    assert (outcome.stop_reason, outcome.exit_code) == ("result", 0), outcome
    assert_group_gone(outcome, repo)


@needs_claude
@pytest.mark.timeout(120)
def test_silence_past_idle_timeout_kills_the_group_and_keeps_the_commit(repo, api_factory):
    api = api_factory(ScriptedModel([
        [bash(BACKGROUND)],
        [bash(f"echo work > work.txt && {COMMIT}")],
        Sleep(60),
        [text("never reached")],
    ]))
    sessions: list[str] = []

    outcome, collector, ndjson = launch(repo, api, Limits(idle_timeout_s=2), sessions=sessions)

    assert (outcome.stop_reason, outcome.exit_code) == ("idle", IDLE_EXIT), outcome
    assert outcome.result is None
    assert outcome.session_id and sessions == [outcome.session_id]  # resumable
    assert_group_gone(outcome, repo)
    assert git(repo, "log", "-1", "--format=%s").strip() == "agent commit"
    assert "work.txt" in git(repo, "show", "--name-only", "--format=", "HEAD")
    assert len(ndjson_lines(ndjson)) == len(collector.pairs) == outcome.events
    print(f"\nidle stop after {outcome.duration_s:.2f}s")


@needs_claude
@pytest.mark.timeout(120)
def test_hard_timeout_stops_a_model_that_keeps_working(repo, api_factory):
    steps: list[Any] = [[bash(BACKGROUND)]]
    steps += [[bash(f"echo step-{i}")] for i in range(300)]
    api = api_factory(ScriptedModel(steps))

    outcome, collector, _ = launch(repo, api, Limits(idle_timeout_s=2, hard_timeout_s=3))

    assert (outcome.stop_reason, outcome.exit_code) == ("hard", HARD_EXIT), outcome
    assert outcome.result is None
    assert 3 <= outcome.duration_s < 3 + 8  # the read loop polls; TERM then KILL take a few seconds at most
    assert len(api.main_requests()) >= 2  # it was really working, not idle
    assert_group_gone(outcome, repo)


@needs_claude
@pytest.mark.timeout(120)
def test_budget_applies_on_top_of_the_hard_timeout(repo, api_factory):
    api = api_factory(ScriptedModel([[bash(f"echo step-{i}")] for i in range(300)]))

    outcome, _, _ = launch(repo, api, Limits(idle_timeout_s=2, hard_timeout_s=60, budget_s=3))

    assert (outcome.stop_reason, outcome.exit_code) == ("budget", HARD_EXIT), outcome
    assert_group_gone(outcome)


SECRETS = {
    "db_password": "S3cretPassw0rd",
    "env_value": "Sup3rS3cretEnvVal42",
    "pem_body": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "anthropic_key": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-xyzXYZ",
}
ENV_FILE = f"DATABASE_URL=postgresql://app:{SECRETS['db_password']}@db/x\nAPI_SECRET={SECRETS['env_value']}\n"
PEM = f"-----BEGIN PRIVATE KEY-----\n{SECRETS['pem_body']}\n-----END PRIVATE KEY-----"


@needs_claude
@pytest.mark.timeout(120)
def test_secrets_never_reach_events_ndjson_or_logs(repo, api_factory, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    api = api_factory(ScriptedModel([
        [bash(f"echo postgresql://app:{SECRETS['db_password']}@db/x")],
        [write(str(repo / ".env"), ENV_FILE)],
        [bash("cat .env")],
        [bash(f"printf '%s\\n' '{PEM}'")],
        [bash(f"echo {SECRETS['anthropic_key']}")],
        [text("All printed.")],
    ]))
    # The database password is known from configuration; the rest is caught by shape.
    redactor = Redactor([SECRETS["db_password"]])

    outcome, collector, ndjson = launch(repo, api, Limits(), redactor=redactor)

    assert outcome.stop_reason == "result" and outcome.exit_code == 0, outcome
    # Control: the secrets really went through the CLI's tool results (and so its stream).
    sent = json.dumps(api.main_requests()[-1].body["messages"])  # the whole conversation
    for value in SECRETS.values():
        assert value in sent, value
    payloads = json.dumps([d for _, d in collector.pairs]) + repr([e for e, _ in collector.pairs])
    on_disk = ndjson.read_text()
    captured = capsys.readouterr()
    logs = captured.out + captured.err + caplog.text
    for name, value in SECRETS.items():
        assert value not in payloads, name
        assert value not in on_disk, name
        assert value not in logs, name
    assert "[REDACTED:" in on_disk
    assert len(on_disk.splitlines()) == outcome.events


@needs_claude
@pytest.mark.timeout(120)
def test_stop_set_by_the_caller_interrupts_and_kills_the_group(repo, api_factory):
    api = api_factory(ScriptedModel([
        [bash(BACKGROUND)],
        [bash("echo still-working")],
        Sleep(60),
        [text("never reached")],
    ]))
    stop = threading.Event()

    def on_pair(event, _raw):
        # Worker shutdown once the second tool has run.
        if isinstance(event, UserMessage) and any(
                "still-working" in json.dumps(r.content) for r in event.tool_results):
            stop.set()

    outcome, collector, _ = launch(repo, api, Limits(), collector=Collector(on_pair), stop=stop)

    assert stop.is_set()
    assert (outcome.stop_reason, outcome.exit_code) == ("interrupted", None), outcome
    assert outcome.duration_s < 30
    assert_group_gone(outcome, repo)


@needs_claude
@pytest.mark.timeout(120)
def test_failing_persistence_ends_the_run_as_error_and_kills_the_group(repo, api_factory):
    api = api_factory(ScriptedModel([[bash("echo x")], Sleep(60), [text("never")]]))

    def broken(batch):
        raise ConnectionError("database gone")

    outcome, _, _ = launch(repo, api, Limits(), collector=broken)  # type: ignore[arg-type]

    assert outcome.stop_reason == "error" and isinstance(outcome.error, ConnectionError), outcome
    assert outcome.duration_s < 30
    assert_group_gone(outcome)


def test_build_argv_follows_the_spec_order():
    full = build_argv("/usr/bin/claude", add_dir="/w/tree", prompt="do it", system_prompt="SYS",
                      model="opus", max_turns=40, allowed_tools=["Bash", "Write"],
                      disallowed_tools=["Bash(git stash:*)", "Bash(git reset --hard:*)", "WebFetch"],
                      max_budget_usd=2.5)
    assert full == [
        "/usr/bin/claude", "-p", "--add-dir", "/w/tree", "--no-session-persistence",
        "--exclude-dynamic-system-prompt-sections", "--strict-mcp-config",
        "--output-format", "stream-json", "--verbose", "--include-partial-messages",
        "--include-hook-events", "--model", "opus", "--max-turns", "40",
        "--tools", "Bash,Write", "--allowed-tools", "Bash,Write",
        "--disallowed-tools", "Bash(git stash:*),Bash(git reset --hard:*),WebFetch", "--max-budget-usd", "2.5",
        "--append-system-prompt", "SYS", "--permission-mode", "bypassPermissions", "do it"]
    minimal = build_argv("claude", add_dir="/w", prompt="p", system_prompt="S", model="sonnet",
                         resume_session="sess-1", strict_mcp=False)
    assert minimal == [
        "claude", "-p", "--add-dir", "/w", "--resume", "sess-1",
        "--exclude-dynamic-system-prompt-sections",
        "--output-format", "stream-json", "--verbose", "--include-partial-messages",
        "--include-hook-events", "--model", "sonnet",
        "--append-system-prompt", "S", "--permission-mode", "bypassPermissions", "p"]


def test_tool_rules_narrow_the_available_tools_to_their_names():
    argv = build_argv("claude", add_dir="/w", prompt="p", system_prompt="S", model="sonnet",
                      allowed_tools="Bash(git commit:*),Bash(git log:*),Read", disallowed_tools=[])
    assert argv[argv.index("--tools") + 1] == "Bash,Read"
    assert argv[argv.index("--allowed-tools") + 1] == "Bash(git commit:*),Bash(git log:*),Read"
    assert "--disallowed-tools" not in argv
    none = build_argv("claude", add_dir="/w", prompt="p", system_prompt="S", model="sonnet", allowed_tools=[])
    assert none[none.index("--tools") + 1] == "" and "--allowed-tools" not in none
    with pytest.raises(ValueError, match="comma"):
        build_argv("claude", add_dir="/w", prompt="p", system_prompt="S", model="sonnet",
                   disallowed_tools=["Bash(echo a,b)"])


def test_a_prompt_over_the_argument_limit_is_truncated_and_says_so():
    prompt = "début " + "é" * 100_000  # 200 KB of two-byte characters
    argv = build_argv("claude", add_dir="/w", prompt=prompt, system_prompt="S", model="sonnet")
    sent = argv[-1]
    assert len(sent.encode("utf-8")) <= MAX_ARG_BYTES < 128 * 1024
    assert sent.startswith("début éé") and "truncated" in sent and "per-argument limit" in sent
    assert sent.encode("utf-8").decode("utf-8") == sent  # no character cut in half
    short = build_argv("claude", add_dir="/w", prompt="short", system_prompt="S", model="sonnet")
    assert short[-1] == "short"
    with pytest.raises(ValueError):
        build_argv("claude", add_dir="/w", prompt="p", system_prompt="x" * (MAX_ARG_BYTES + 1),
                   model="sonnet")


@needs_claude
@pytest.mark.timeout(120)
def test_the_cli_accepts_a_truncated_huge_prompt(repo, api_factory, monkeypatch):
    api = api_factory(ScriptedModel([[text("read it")]]))
    huge = "x" * 400_000  # three times what one argument may hold
    import tests.spawn.test_runner as me
    monkeypatch.setattr(me, "PROMPT", huge)

    outcome, _, _ = launch(repo, api, Limits())

    assert outcome.stop_reason == "result" and outcome.exit_code == 0, outcome
    sent = json.dumps(api.main_requests()[0].body["messages"])
    assert "truncated" in sent and "x" * 100_000 in sent


@needs_claude
@pytest.mark.timeout(120)
def test_the_agent_runs_under_the_umask_it_is_given(repo, api_factory):
    api = api_factory(ScriptedModel([[bash("mkdir made && echo x > made/file && umask > umask.txt")],
                                     [text("done")]]))
    home = repo.parent / "home"
    home.mkdir()
    argv = build_argv(CLAUDE, add_dir=repo, prompt=PROMPT, system_prompt=SYSTEM, model="sonnet")
    before = os.umask(0o022)  # what the worker process has: the child must not depend on it
    try:
        outcome = run(argv, cwd=repo, env=cli_env(api.url, home), limits=Limits(budget_s=60), redactor=Redactor(),
                      on_events=Collector(), ndjson_path=None, umask=0o077)
    finally:
        os.umask(before)
    assert outcome.stop_reason == "result"
    assert (repo / "umask.txt").read_text().strip() == "0077"
    assert (repo / "made").stat().st_mode & 0o777 == 0o700
    assert (repo / "made" / "file").stat().st_mode & 0o777 == 0o600


@pytest.mark.timeout(60)
@pytest.mark.parametrize("script, at_least, below", [
    ("sleep 60", 6.0, 6.0 + 10),           # silent from the start: the start limit, not the idle one
    ("echo booted; sleep 60", 0.5, 6.0),   # silent after its first byte: the idle limit from that byte
])
def test_idle_counts_from_the_first_output_and_a_silent_start_waits_its_own_limit(tmp_path, script, at_least,
                                                                                  below):
    outcome = run(["sh", "-c", script], cwd=tmp_path, env={"PATH": os.environ["PATH"]},
                  limits=Limits(idle_timeout_s=0.5, start_timeout_s=6.0, hard_timeout_s=30),
                  redactor=Redactor([]), on_events=Collector(), ndjson_path=None)
    assert (outcome.stop_reason, outcome.exit_code) == ("idle", IDLE_EXIT), outcome
    assert at_least <= outcome.duration_s < below, outcome
