"""The real Claude Code CLI, run offline against the scripted API of tests/services/claude_api.py.

The pinned CLI (scripts/install-claude-cli) runs under a real pty (pexpect, 200x50) with
exactly the argument order of SPEC §8, in a real temporary git repository, and does real
work there: Bash runs `git status` and `git commit`, Write creates the contract file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.services.claude_api import ClaudeAPI, ScriptedModel, Sleep, bash, start_claude_api, text, write
from tests.spawn.conftest import git

pexpect = pytest.importorskip("pexpect", reason="pexpect is not installed (pip install pexpect)")

CLAUDE = shutil.which("claude")
needs_claude = pytest.mark.skipif(
    CLAUDE is None, reason="the `claude` CLI is not installed (run scripts/install-claude-cli)"
)

SYSTEM = "You are a scripted test agent. Write contract.json early; commit with git."
PROMPT = "Handle the scripted task."
CONTRACT = {"ok": True, "tenant": None, "commits": [], "summary_md": "x"}
COMMIT = "git add -A && git -c user.email=a@b -c user.name=a commit -m 'agent commit'"


def commit_contract(path: Path) -> ScriptedModel:
    """A model that looks at the tree, writes CONTRACT to `path`, commits and says so."""
    return ScriptedModel([
        [text("Checking the tree."), bash("git status")],
        [write(str(path), json.dumps(CONTRACT))],
        [bash(COMMIT)],
        [text("Committed the contract.")],
    ])


def spec_args(add_dir: str, prompt: str, system: str, *, model: str = "sonnet",
              resume: str | None = None, strict_mcp: bool = True, max_turns: int | None = 40,
              allowed_tools: str | None = None, max_budget_usd: float | None = None) -> list[str]:
    """The arguments of SPEC §8, in its order (``--add-dir`` first: it is variadic)."""
    args = ["-p", "--add-dir", add_dir]
    args += ["--resume", resume] if resume else ["--no-session-persistence"]
    args += ["--exclude-dynamic-system-prompt-sections"]
    if strict_mcp:
        args += ["--strict-mcp-config"]
    args += ["--output-format", "stream-json", "--verbose", "--include-partial-messages",
             "--include-hook-events", "--model", model]
    if max_turns is not None:
        args += ["--max-turns", str(max_turns)]
    if allowed_tools is not None:
        args += ["--allowed-tools", allowed_tools]
    if max_budget_usd is not None:
        # Not in the SPEC's argument list, but its lessons ask for a budget.
        args += ["--max-budget-usd", str(max_budget_usd)]
    args += ["--append-system-prompt", system, "--permission-mode", "bypassPermissions", prompt]
    return args


def cli_env(api_url: str, home: Path) -> dict[str, str]:
    """A controlled environment: nothing of the caller's leaks in but PATH."""
    scratch = home / "tmp"
    scratch.mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        "ANTHROPIC_BASE_URL": api_url,
        "ANTHROPIC_API_KEY": "test",
        # As root the CLI refuses bypassPermissions without it.
        "IS_SANDBOX": "1",
        "DISABLE_AUTOUPDATER": "1",
        # Without it the CLI also sends `HEAD /api/hello` to the base URL first.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Else it leaves /tmp/claude-<uid>/<cwd>/… and /tmp/cc-socks/<pid>.sock behind.
        "CLAUDE_CODE_TMPDIR": str(scratch),
    }


@dataclass
class Run:
    raw: str
    lines: list[tuple[float, str]]  # (monotonic arrival time, line), `\r` stripped
    exitstatus: int | None
    signalstatus: int | None
    duration: float
    events: list[dict[str, Any]] = field(default_factory=list)

    def of(self, type_: str, subtype: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == type_
                and (subtype is None or e.get("subtype") == subtype)]

    @property
    def result(self) -> dict[str, Any]:
        results = self.of("result")
        assert results, f"no result event; tail of output: {self.raw[-2000:]!r}"
        return results[-1]

    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for e in self.of("assistant") for b in e["message"].get("content", [])
                if b.get("type") == "tool_use"]


def _split(buffer: str, now: float, lines: list[tuple[float, str]]) -> str:
    *complete, rest = buffer.split("\n")
    lines.extend((now, line) for line in complete)
    return rest


def parse(raw_lines: list[tuple[float, str]]) -> list[dict[str, Any]]:
    events = []
    for _, line in raw_lines:
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def spawn(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 90):
    return pexpect.spawn(CLAUDE, args, env=env, cwd=str(cwd), dimensions=(50, 200),
                         encoding="utf-8", codec_errors="replace", timeout=timeout,
                         maxread=1 << 20)


def drain(child, started: float, timeout: float = 90, on_chunk=None) -> Run:
    """Read the pty to EOF, timestamping each line; wait for the exit status."""
    chunks, lines, buffer = [], [], ""
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = child.read_nonblocking(1 << 20, timeout=max(0.1, deadline - time.monotonic()))
        except pexpect.EOF:
            break
        except pexpect.TIMEOUT:
            child.terminate(force=True)
            pytest.fail(f"claude did not finish in {timeout}s; tail: {''.join(chunks)[-2000:]!r}")
        chunks.append(chunk)
        buffer = _split(buffer + chunk.replace("\r", ""), time.monotonic(), lines)
        if on_chunk:
            on_chunk(lines)
    if buffer:
        lines.append((time.monotonic(), buffer))
    child.close()
    raw = "".join(chunks)
    return Run(raw, lines, child.exitstatus, child.signalstatus, time.monotonic() - started, parse(lines))


def run_claude(args: list[str], api: ClaudeAPI, cwd: Path, home: Path, timeout: float = 90) -> Run:
    started = time.monotonic()
    child = spawn(args, cli_env(api.url, home), cwd, timeout)
    return drain(child, started, timeout)


@pytest.fixture
def home(tmp_path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@needs_claude
@pytest.mark.timeout(120)
def test_scripted_run_commits_contract_in_real_repo(repo, home, api_factory):
    contract_path = repo / "contract.json"
    api = api_factory(commit_contract(contract_path))

    run = run_claude(spec_args(str(repo), PROMPT, SYSTEM), api, repo, home)

    assert run.exitstatus == 0, run.raw[-2000:]
    init = run.of("system", "init")
    assert init and init[0]["session_id"], "no system/init event with a session_id"
    assert init[0]["permissionMode"] == "bypassPermissions"
    names = [b["name"] for b in run.tool_uses()]
    assert names == ["Bash", "Write", "Bash"], names
    result = run.result
    assert result["subtype"] == "success" and result["is_error"] is False, result
    assert result["num_turns"] == 4
    assert result["session_id"] == init[0]["session_id"]
    assert result["permission_denials"] == []
    # Partial messages are there too (--include-partial-messages).
    assert run.of("stream_event")

    # The real work happened in the real repository.
    assert json.loads(contract_path.read_text()) == CONTRACT
    assert git(repo, "log", "-1", "--format=%s").strip() == "agent commit"
    assert "contract.json" in git(repo, "show", "--name-only", "--format=", "HEAD")
    assert git(repo, "status", "--porcelain").strip() == ""

    # The server saw only main-loop requests, one per step, each after the previous
    # tool ran (the real `git status` output came back as a tool_result).
    main = api.main_requests()
    assert [r.step for r in main] == [0, 1, 2, 3]
    assert "Bash" in main[0].tools and "Write" in main[0].tools
    assert SYSTEM in json.dumps(main[0].body["system"])
    assert "On branch main" in json.dumps(main[1].tool_results())
    assert "agent commit" in json.dumps(main[3].tool_results())
    assert {f"{r.method} {r.path}" for r in api.requests} == {"POST /v1/messages"}
    print(f"\nscripted run: {run.duration:.2f}s, requests: {api.paths()}")


@needs_claude
@pytest.mark.timeout(120)
def test_cli_is_silent_while_the_model_is_silent(repo, home, api_factory):
    silence = 5.0
    api = api_factory(ScriptedModel([
        [bash("echo before-silence")],
        Sleep(silence),
        [text("after the silence")],
    ]))
    started = time.monotonic()
    child = spawn(spec_args(str(repo), PROMPT, SYSTEM), cli_env(api.url, home), repo)

    # Read until the server holds the request it is scripted to sit on.
    lines: list[tuple[float, str]] = []
    buffer = ""
    deadline = time.monotonic() + 60
    while not [r for r in api.main_requests() if r.step == 1]:
        assert time.monotonic() < deadline, "the CLI never sent its second request"
        try:
            buffer = _split(buffer + child.read_nonblocking(1 << 20, timeout=0.2).replace("\r", ""),
                            time.monotonic(), lines)
        except pexpect.TIMEOUT:
            pass
    held_at = [r for r in api.main_requests() if r.step == 1][0].at
    # Let what the CLI printed while sending the request arrive (system/status "requesting").
    end = held_at + 0.5
    while time.monotonic() < end:
        try:
            buffer = _split(buffer + child.read_nonblocking(1 << 20, timeout=0.1).replace("\r", ""),
                            time.monotonic(), lines)
        except pexpect.TIMEOUT:
            pass
    quiet = silence - (time.monotonic() - held_at) - 0.7
    assert quiet > 3
    with pytest.raises(pexpect.TIMEOUT):
        child.read_nonblocking(1 << 20, timeout=quiet)  # nothing at all on the pty

    run = drain(child, started)
    lines += run.lines
    events = parse(lines)
    assert run.exitstatus == 0
    result = [e for e in events if e.get("type") == "result"][-1]
    assert result["subtype"] == "success" and result["is_error"] is False
    # The first line after the silence came no earlier than the scripted silence.
    after = [t for t, _ in lines if t > held_at + 0.5]
    assert after and after[0] - held_at >= silence - 0.2, (after[:1], held_at)
    last_before = max(t for t, _ in lines if t <= held_at + 0.5)
    print(f"\nsilent gap on the pty: {after[0] - last_before:.2f}s for a {silence}s model silence; "
          f"run took {run.duration:.2f}s")


@needs_claude
@pytest.mark.timeout(120)
def test_many_turns_secret_and_huge_line_survive_the_pty(repo, home, api_factory):
    secret = "PGPASSWORD=s3cr3t-not-redacted-by-the-cli"
    huge = "A" * 3_000_000
    steps: list[Any] = [[bash(f"echo step-{i}")] for i in range(25)]
    steps += [[bash(f"echo {secret}")], [write(str(repo / "big.txt"), huge)], [text("done")]]
    api = api_factory(ScriptedModel(steps))

    run = run_claude(spec_args(str(repo), PROMPT, SYSTEM), api, repo, home)

    assert run.exitstatus == 0
    assert run.result["subtype"] == "success" and run.result["num_turns"] == 28
    # The CLI passes tool output through verbatim: redaction is the reader's job.
    assert secret in run.raw
    longest = max(len(line) for _, line in run.lines)
    assert longest > 3_000_000
    assert (repo / "big.txt").read_text() == huge
    print(f"\n28 turns in {run.duration:.2f}s, longest stream line {longest} chars")


@needs_claude
@pytest.mark.timeout(120)
def test_spec_flags_against_the_pinned_cli(repo, home, api_factory):
    help_text = subprocess.run([CLAUDE, "--help"], capture_output=True, text=True,
                               env={"PATH": os.environ["PATH"], "HOME": str(home)}, timeout=30).stdout
    flags = ["-p", "--add-dir", "--no-session-persistence", "--resume",
             "--exclude-dynamic-system-prompt-sections", "--strict-mcp-config", "--output-format",
             "--verbose", "--include-partial-messages", "--include-hook-events", "--model",
             "--max-turns", "--allowed-tools", "--append-system-prompt", "--permission-mode",
             "--max-budget-usd", "--tools", "--disallowed-tools"]
    in_help = {f: (f in help_text) for f in flags}
    findings: dict[str, str] = {}

    apis: list[ClaudeAPI] = []

    def once(args: list[str], model: ScriptedModel) -> tuple[Run, ClaudeAPI]:
        api = api_factory(model)
        apis.append(api)
        return run_claude(args, api, repo, home), api

    def ok(run: Run) -> bool:
        return run.exitstatus == 0 and run.result["subtype"] == "success" and not run.result["is_error"]

    # Control: an unknown option is refused, so "accepted" below means something.
    bogus, _ = once(["-p", "--definitely-not-a-flag", "hi"], ScriptedModel([]))
    assert bogus.exitstatus != 0 and "unknown option" in bogus.raw.lower(), bogus.raw[-500:]

    # Full SPEC order, every optional flag present (--resume aside).
    run, _ = once(spec_args(str(repo), PROMPT, SYSTEM, allowed_tools="Bash,Write,Read",
                            max_budget_usd=5), ScriptedModel([[text("hi")]]))
    findings["full SPEC order + --allowed-tools + --max-budget-usd"] = "accepted" if ok(run) else run.raw[-300:]
    # The prompt was not eaten by a variadic option.
    assert ok(run)

    # What synedre.spawn.launcher.build_argv adds for the tool policy: --tools, then the deny
    # rules (spaces inside a rule included) as one variadic argument, ended by the next option.
    args = spec_args(str(repo), PROMPT, SYSTEM, allowed_tools="Bash,Read", max_budget_usd=5)
    i = args.index("--allowed-tools")
    args[i:i] = ["--tools", "Bash,Read"]
    i = args.index("--max-budget-usd")
    args[i:i] = ["--disallowed-tools", "Bash(git stash:*),Bash(git reset --hard:*),WebFetch"]
    run, api = once(args, ScriptedModel([[bash("git reset --hard HEAD")], [text("hi")]]))
    assert ok(run) and set(api.main_requests()[0].tools) - {"DeferredToolPlaceholder"} == {"Bash", "Read"}
    assert [d["tool_input"]["command"] for d in run.result["permission_denials"]] == ["git reset --hard HEAD"]
    assert "Handle the scripted task." in json.dumps(api.main_requests()[0].body["messages"])
    findings["--tools + --disallowed-tools"] = "accepted; tools narrowed, deny rule with spaces applied"

    # Optional parts left out.
    run, _ = once(spec_args(str(repo), PROMPT, SYSTEM, strict_mcp=False, max_turns=None),
                  ScriptedModel([[text("hi")]]))
    assert ok(run)
    findings["without --strict-mcp-config / --max-turns"] = "accepted"

    # --max-turns is honoured although --help does not list it.
    run, _ = once(spec_args(str(repo), PROMPT, SYSTEM, max_turns=1),
                  ScriptedModel([[bash("echo 1")], [bash("echo 2")], [text("never")]]))
    findings["--max-turns 1 with a 3-turn script"] = (
        f"exit {run.exitstatus}, subtype {run.result['subtype']}, is_error {run.result['is_error']}, "
        f"num_turns {run.result['num_turns']}")
    assert run.result["subtype"] == "error_max_turns"

    # --max-budget-usd is honoured (the scripted usage costs a few cents per turn).
    run, _ = once(spec_args(str(repo), PROMPT, SYSTEM, max_budget_usd=0.0001),
                  ScriptedModel([[bash("echo 1")], [bash("echo 2")], [text("never")]]))
    findings["--max-budget-usd 0.0001"] = (
        f"exit {run.exitstatus}, subtype {run.result['subtype']}, is_error {run.result['is_error']}, "
        f"num_turns {run.result['num_turns']}")
    assert run.result["subtype"] != "success" or run.result["is_error"]

    # --resume <id>: a persisted session (no --no-session-persistence) is resumed with
    # its conversation, so the scripted model is asked for its second step.
    first, _ = once([a for a in spec_args(str(repo), PROMPT, SYSTEM) if a != "--no-session-persistence"],
                    ScriptedModel([[text("first")]]))
    assert ok(first)
    session_id = first.of("system", "init")[0]["session_id"]
    second, api = once(spec_args(str(repo), "continue", SYSTEM, resume=session_id),
                       ScriptedModel([[text("first")], [text("resumed")]]))
    assert ok(second), second.raw[-500:]
    assert [r.step for r in api.main_requests()] == [1]
    findings["--resume <id>"] = (f"accepted; conversation carried over; session id "
                                 f"{'kept' if second.result['session_id'] == session_id else 'changed'}")

    # As root, bypassPermissions needs IS_SANDBOX=1.
    if os.geteuid() == 0:
        env = cli_env("http://127.0.0.1:9", home)
        del env["IS_SANDBOX"]
        child = spawn(spec_args(str(repo), PROMPT, SYSTEM), env, repo)
        refused = drain(child, time.monotonic())
        assert refused.exitstatus != 0 and "root" in refused.raw
        findings["bypassPermissions as root without IS_SANDBOX"] = "refused: " + refused.raw.strip()[:120]

    paths = sorted({f"{r.method} {r.path}?{r.query}" for a in apis for r in a.requests})
    kinds = sorted({r.kind for a in apis for r in a.requests})
    print("\nrequests made across these runs:", paths, "kinds:", kinds)
    print("--help lists:", {f: v for f, v in in_help.items()})
    for k, v in findings.items():
        print(f"{k}: {v}")
    assert all(v for f, v in in_help.items() if f not in ("--max-turns",)), in_help


@pytest.mark.timeout(30)
def test_server_tells_main_from_auxiliary_and_subagent_requests():
    """No CLI needed: the classification and the answers, over plain HTTP."""
    import urllib.request

    api = start_claude_api(ScriptedModel([[bash("git status")], [text("bye")]]))
    try:
        def post(path: str, body: dict, headers: dict | None = None) -> tuple[str, str]:
            req = urllib.request.Request(api.url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"content-type": "application/json", **(headers or {})})
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.headers.get("content-type", ""), resp.read().decode()

        tools = [{"name": "Bash", "input_schema": {}}, {"name": "Write", "input_schema": {}}]
        user = [{"role": "user", "content": "go"}]
        # A side request (no tools): short text, script untouched.
        _, aux = post("/v1/messages", {"model": "claude-haiku", "max_tokens": 1, "messages": user})
        assert json.loads(aux)["content"][0]["type"] == "text"
        # A subagent: Bash in its tools, but under x-claude-code-agent-id.
        _, sub = post("/v1/messages", {"model": "m", "messages": user, "tools": tools},
                      {"x-claude-code-agent-id": "a1"})
        assert json.loads(sub)["stop_reason"] == "end_turn"
        # The main loop, streamed: step 0 is the Bash tool_use.
        ctype, sse = post("/v1/messages?beta=true", {"model": "m", "messages": user, "tools": tools,
                                                       "stream": True})
        assert ctype.startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in sse.splitlines() if line.startswith("data: ")]
        assert [e["type"] for e in events] == [
            "message_start", "content_block_start", "content_block_delta", "content_block_stop",
            "message_delta", "message_stop"]
        assert events[1]["content_block"]["name"] == "Bash"
        assert json.loads(events[2]["delta"]["partial_json"]) == {"command": "git status"}
        assert events[4]["delta"]["stop_reason"] == "tool_use"
        # A retry of the same conversation gets the same step again (non-stream here).
        _, again = post("/v1/messages", {"model": "m", "messages": user, "tools": tools})
        assert json.loads(again)["content"][0]["name"] == "Bash"
        # The next conversation step, then past the end of the script.
        convo = user + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
        _, last = post("/v1/messages", {"model": "m", "messages": convo, "tools": tools})
        assert json.loads(last)["content"] == [{"type": "text", "text": "bye"}]
        _, count = post("/v1/messages/count_tokens", {"model": "m", "messages": user})
        assert json.loads(count)["input_tokens"] > 0
        assert [r.kind for r in api.requests] == ["aux", "subagent", "main", "main", "main", "count_tokens"]
        assert [r.step for r in api.main_requests()] == [0, 0, 1]
    finally:
        api.stop()
