"""Launches apart from each other, the fleet's files out of reach (issue 25, items 4 and 5).

Real spawn workers, the real `claude` CLI (its own bubblewrap sandbox) against the scripted
Messages API, real git repositories, PostgreSQL and Redis. What the agents try is judged by the
tool results stored in `synedre.launch_events`, as tests/spawn/test_sandbox.py does, and every
refusal is set against the same attempt on the agent's own files, which succeeds."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import uuid
from pathlib import Path

import psycopg
import pytest

import synedre
from tests.services import stack
from tests.services.claude_api import PerLaunch, ScriptedModel, Turn, assistant_turns, bash, start_claude_api, text
from tests.spawn.conftest import git
from tests.spawn.test_launch_e2e import CONTRACT, SECRETS, make_launchable, q

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed"),
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed "
                                 "(scripts/system-deps)")]

CLIENTS = ("alpha-co", "beta-co")
WAIT_S = 90.0  # how long one agent's request waits for the other's at a meeting point


def read(path: str) -> dict:
    return {"type": "tool_use", "name": "Read", "input": {"file_path": path}}


def write_tool(path: str, content: str) -> dict:
    return {"type": "tool_use", "name": "Write", "input": {"file_path": path, "content": content}}


def py_read(path: str) -> dict:
    """A read no deny rule on a command's text sees: only the sandbox can refuse it."""
    return bash(f"python3 -c \"print(open('{path}').read())\"")


def calls(events: list[dict]) -> list[tuple[str, dict, str, bool]]:
    """(tool, input, result text, is_error) of every tool call the agent made, in the order the
    model asked for them (the CLI runs some at once), from stored events."""
    asked: dict[str, tuple[str, dict]] = {}
    results: dict[str, tuple[str, bool]] = {}
    for e in events:
        message = e.get("message") if e.get("type") in ("assistant", "user") else None
        for b in message.get("content") or [] if isinstance(message, dict) else []:
            if not isinstance(b, dict):
                continue
            if e.get("type") == "assistant" and b.get("type") == "tool_use":
                asked[b["id"]] = (b["name"], b["input"])
            elif e.get("type") == "user" and b.get("type") == "tool_result":
                content = b.get("content")
                results[b["tool_use_id"]] = (content if isinstance(content, str) else json.dumps(content),
                                             bool(b.get("is_error")))
    return [(*call, *results[i]) for i, call in asked.items() if i in results]


def events_of(url: str, message_id: int) -> list[dict]:
    return [p for p, in q(url, "SELECT e.payload FROM synedre.launch_events e JOIN synedre.launches l"
                               " ON l.id = e.launch_id WHERE l.message_id = %s ORDER BY e.seq", message_id)]


def result_text(body: dict) -> str:
    """The text of the tool results a request carries since the model's last answer."""
    out = []
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "assistant":
            break
        for b in m.get("content") if isinstance(m.get("content"), list) else []:
            content = b.get("content") if isinstance(b, dict) and b.get("type") == "tool_result" else None
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out += [c.get("text", "") for c in content if isinstance(c, dict)]
    return "\n".join(reversed(out))


def on_host(path: str, found: dict[str, str]) -> str:
    """Where a path an agent named is for the rest of the host: each launch's /tmp is its home's
    `tmp` (launcher.Apart)."""
    if Path(path).is_relative_to("/tmp"):
        return str(Path(found["HOME"], "tmp", Path(path).relative_to("/tmp")))
    return path


class _One:
    """The answer to one request, as the scripted API asks a model for it."""

    def __init__(self, blocks: list[dict]):
        self._turn = Turn(blocks)

    def turn(self, index: int) -> Turn:
        return self._turn

    def delay(self, index: int) -> float:
        return 0.0


# Step 0: a secret in every place the agent's sandbox lets it write, and where those places are.
PLANT = r"""s="SECRET-{me}-{tag}"
printf '%s' "$s" > "$TMPDIR/secret.txt"
printf '%s' "$s" > secret.txt
printf '%s' "$s" > "$(dirname "$SYNEDRE_CONTRACT_PATH")/secret.txt"
printf '%s' "$s" > "$HOME/.npm/_logs/secret.txt"
printf '%s' "$s" > /dev/shm/secret-{me}.txt
printf '%s' "$s" > /tmp/secret-{me}.txt 2>/dev/null || echo "TMP_READ_ONLY=yes"
printf '%s' "$s" > /var/tmp/secret-{me}.txt 2>/dev/null || echo "VAR_TMP_READ_ONLY=yes"
printf '%s' {contract} > "$SYNEDRE_CONTRACT_PATH"
echo "TMP=$TMPDIR"; echo "CWD=$PWD"; echo "HOME=$HOME"; echo "CONFIG=$CLAUDE_CONFIG_DIR"
echo "OUT=$(dirname "$SYNEDRE_CONTRACT_PATH")"
echo "TRANSCRIPT=$(ls "$CLAUDE_CONFIG_DIR"/projects/*/*.jsonl | head -1)"
echo "SLASH_TMP=$(ls -A /tmp | tr '\n' ' ')"
"""


class Apart(PerLaunch):
    """Two launches, one conversation each. Step 0 plants a secret in every writable place;
    step 1, once both have planted (so the two agents run at the same time), reads its own
    places (the control) and tries to read and write the other's; the last answer waits
    until both have tried, so neither agent is gone while the other is at it."""

    def __init__(self, tag: str, canary: Path):
        super().__init__(lambda _: ScriptedModel([]))
        self.tag, self.canary = tag, canary
        self.found: dict[str, dict[str, str]] = {}
        self.attempts: dict[str, dict[str, list[dict]]] = {}
        self.tried: set[str] = set()
        self.only_theirs: dict[str, list[str]] = {}
        self.cond = threading.Condition()

    def for_request(self, body):  # noqa: ANN001 - the scripted API's hook
        first = json.dumps(body["messages"][0], ensure_ascii=False)
        me, = [c for c in CLIENTS if f"{c} (" in first]
        other, = [c for c in CLIENTS if c != me]
        step = assistant_turns(body)
        if step == 0:
            return _One([bash(PLANT.format(me=me, tag=self.tag, contract=f"'{CONTRACT}'"))])
        if step == 1:
            with self.cond:
                self.found[me] = dict(re.findall(r"(?m)^([A-Z_]+)=(.*)$", result_text(body)))
                self.cond.notify_all()
                if not self.cond.wait_for(lambda: other in self.found, WAIT_S):
                    return _One([text(f"{other} never planted")])
                self.attempts[me] = self.attempt(me, self.found[me], other, self.found[other])
            return _One([b for group in self.attempts[me].values() for b in group])
        with self.cond:
            self.tried.add(me)
            self.cond.notify_all()
            self.cond.wait_for(lambda: len(self.tried) == len(CLIENTS), WAIT_S)
        return _One([text("done")])

    def attempt(self, me: str, mine: dict[str, str], other: str, theirs: dict[str, str]) -> dict[str, list[dict]]:
        """`own`: reads of its own secrets, which succeed. `other`: the same reads and writes
        on the other's places, named as the host has them, which fail. `named`: the other's
        temporary directory by the name the other gave, which is this launch's own (it may
        be read, and holds nothing of the other's)."""
        def reads(p: dict[str, str], tmp: str) -> list[dict]:
            return [bash(f"cat {tmp}/secret.txt"), bash(f"cat {p['CWD']}/secret.txt"),
                    bash(f"cat {p['OUT']}/secret.txt"), bash(f"cat {p['HOME']}/.npm/_logs/secret.txt"),
                    py_read(f"{tmp}/secret.txt"), bash(f"ls {p['HOME']}"), bash(f"ls {p['CONFIG']}/projects"),
                    bash(f"grep -o 'SECRET-[a-z-]*-[0-9a-f]*' {p['TRANSCRIPT']}"), read(f"{p['CWD']}/secret.txt"),
                    read(p["TRANSCRIPT"])]
        tmp = on_host(theirs["TMP"], theirs)
        mark = f"from-{me}"
        writes = [bash(f"echo x > {d}/{mark}") for d in (tmp, theirs["CWD"], theirs["OUT"], theirs["HOME"],
                                                         theirs["CONFIG"], f"{theirs['HOME']}/.npm/_logs")]
        # what the other's CLI keeps in its /tmp (its proxy's socket...), a file of the host's /tmp
        only_theirs = self.only_theirs[me] = sorted(set(theirs["SLASH_TMP"].split()) - set(mine["SLASH_TMP"].split()))
        slash_tmp = [bash(f"ls -d /tmp/{name}") for name in only_theirs] + [bash(f"cat {self.canary}")]
        return {"own": reads(mine, mine["TMP"]),  # /dev/shm is not: every sandboxed command has its own /dev
                # the Read tool refuses even its own temporary directory (outside the working ones)
                "other": [*reads(theirs, tmp), read(f"{tmp}/secret.txt"), bash(f"cat /dev/shm/secret-{other}.txt"),
                          *writes,
                          write_tool(f"{theirs['CWD']}/{mark}-w", "x"), write_tool(f"{tmp}/{mark}-w", "x"),
                          *slash_tmp],
                "named": [bash(f"cat {theirs['TMP']}/secret.txt")]}


@pytest.fixture
def two_clients(services, tmp_path):
    """Two clients, each with its own repository (its tenant's), and one message of each."""
    url = services["db"]
    mids = dict(zip(CLIENTS, make_launchable(url, tmp_path, n=2, tag="iso"), strict=True))
    with psycopg.connect(url, autocommit=True) as c:
        for client, mid in mids.items():
            path = tmp_path / f"repo-{client}"
            path.mkdir()
            git(path, "init", "-q", "-b", "preprod")
            git(path, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-q", "--allow-empty", "-m", client)
            cid = c.execute("INSERT INTO synedre.clients (codename, name) VALUES (%s, %s) RETURNING id",
                            (client, client)).fetchone()[0]
            c.execute("INSERT INTO synedre.tenant_topology (client_id, deploy_target, config) VALUES (%s, %s, %s)",
                      (cid, client, json.dumps({"repo": str(path)})))
            c.execute("UPDATE synedre.email_states SET client_id = %s, client_source = 'envelope'"
                      " WHERE message_id = %s", (cid, mid))
    return mids


def launch_env(services, api, **extra: str) -> dict[str, str]:
    return {**services["env"], "SYNEDRE_CLAUDE_BIN": shutil.which("claude"), "SYNEDRE_ANTHROPIC_BASE_URL": api.url,
            "SYNEDRE_ANTHROPIC_API_KEY": SECRETS[1], "SYNEDRE_IDLE_TIMEOUT_S": "90",
            "SYNEDRE_LAUNCH_BUDGET_S": "200", **extra}


def finished(url: str, n: int) -> bool:
    return q(url, "SELECT count(*) FROM synedre.launches WHERE status <> 'running'")[0][0] >= n


def run_launches(services, model, mids: list[int], **extra: str):
    """The messages launched at once on one spawn worker, to their end: the worker's output."""
    api = start_claude_api(model)
    worker = stack.celery_worker(launch_env(services, api, **extra), services["logs"], queues="spawn",
                                 concurrency=len(mids))
    try:
        from tasks.app import app
        for mid in mids:
            app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: finished(services["db"], len(mids)), 240, "the launches to end", interval=0.5)
    finally:
        worker.stop()
        api.stop()
    return worker.output()


def test_two_concurrent_launches_for_two_clients_read_and_write_nothing_of_each_other(
        services, two_clients, tmp_path):
    url, tag = services["db"], uuid.uuid4().hex[:8]
    canary = Path("/tmp") / f"synedre-canary-{tag}.txt"  # the host's /tmp, readable by anyone
    canary.write_text(f"CANARY-{tag}")
    canary.chmod(0o644)
    model = Apart(tag, canary)
    try:
        output = run_launches(services, model, list(two_clients.values()))
    finally:
        canary.unlink()
    # the two ran at the same time, and each tried
    spans = q(url, "SELECT started_at, ended_at FROM synedre.launches")
    assert len(spans) == 2 and max(s for s, _ in spans) < min(e for _, e in spans), spans
    assert model.tried == set(CLIENTS), (model.found, output[-3000:])
    for client, mid in two_clients.items():
        other, = [c for c in CLIENTS if c != client]
        mine, theirs = model.found[client], model.found[other]
        attempts = model.attempts[client]
        done = calls(events_of(url, mid))[1:]  # after the planting
        assert [(name, inp) for name, inp, _, _ in done] == [(b["name"], b["input"]) for group in attempts.values()
                                                             for b in group], done
        own = done[:len(attempts["own"])]
        others = done[len(attempts["own"]):len(attempts["own"]) + len(attempts["other"])]
        named = done[len(attempts["own"]) + len(attempts["other"]):]
        # nothing of the other's (nor of the host's /tmp) reached the agent, by any way...
        leaked = [(i, r) for _, i, r, _ in others + named if f"SECRET-{other}" in r or f"CANARY-{tag}" in r]
        assert leaked == [], client
        # ...every attempt on the other's places failed...
        assert [(n, i, r) for n, i, r, err in others if not err] == [], client
        # ...and the same reads of its own places succeed, its secret in each file read
        assert [(n, i, r) for n, i, r, err in own if err] == [], client
        assert sum(f"SECRET-{client}-{tag}" in r for *_, r, _ in own) == 8, own
        # by the name the other gave its temporary directory, the agent finds its own
        assert len(named) == 1 and f"SECRET-{client}-{tag}" in named[0][2], named
        # what the attempts went for is really there, on the host: each its client's clone, its
        # own temporary directory, and the other's CLI's files in the other's /tmp
        assert Path(mine["CWD"]).parent.name == f"repo-{client}"
        for place in (on_host(theirs["TMP"], theirs), theirs["CWD"], theirs["OUT"], f"{theirs['HOME']}/.npm/_logs"):
            assert Path(place, "secret.txt").read_text() == f"SECRET-{other}-{tag}", place
        assert f"SECRET-{other}-{tag}" in Path(theirs["TRANSCRIPT"]).read_text()
        assert any(name.startswith("claude-http-") for name in model.only_theirs[client]), model.only_theirs
        assert mine["TMP_READ_ONLY"] == mine["VAR_TMP_READ_ONLY"] == "yes"  # nothing shared to write in
    # nothing either wrote landed anywhere of the other's, nor in the host's /tmp
    assert [str(p) for p in tmp_path.rglob("from-*")] == []
    assert [p for c in CLIENTS for p in Path("/tmp").glob(f"secret-{c}*")] == []
    assert [p for p in Path("/tmp").glob("claude-*/*") if p.name == "secret.txt" or p.name.startswith("from-")] == []


@pytest.fixture
def fleet_files(tmp_path):
    """The fleet's configuration, where the settings say, readable by anyone: only the sandbox
    stands between the agent and them. `.env` is always the checkout's (made, then removed)."""
    tag = uuid.uuid4().hex[:8]
    conf = Path(f"/var/tmp/synedre-fleet-{tag}")  # neither /tmp (the launch's own) nor the checkout
    conf.mkdir(mode=0o755)
    conf.chmod(0o755)
    files = {"SYNEDRE_MAILBOXES_FILE": conf / "mailboxes.toml",
             "SYNEDRE_APPROVAL_POLICY_FILE": conf / "approval-policy.toml",
             "SYNEDRE_FLOWER_AUTH_FILE": conf / "flower-users"}
    files["SYNEDRE_MAILBOXES_FILE"].write_text(Path(os.environ["SYNEDRE_MAILBOXES_FILE"]).read_text()
                                               + f"# MAILBOXES-{tag}\n")
    files["SYNEDRE_APPROVAL_POLICY_FILE"].write_text(
        Path(os.environ["SYNEDRE_APPROVAL_POLICY_FILE"]).read_text() + f"# POLICY-{tag}\n")
    files["SYNEDRE_FLOWER_AUTH_FILE"].write_text(f"flower:FLOWER-{tag}\n")
    dotenv = synedre.ROOT / ".env"
    made = not dotenv.exists()
    if made:
        dotenv.write_text(f"ISOLATION_TEST_MARKER=DOTENV-{tag}\n")
    # the default layout: the state directory inside the checkout, which is denied as a whole
    default_state = synedre.ROOT / ".synedre"
    made_state = not default_state.exists()
    state = default_state / f"isolation-{tag}"
    readable = [*files.values(), *([dotenv] if made else [])]  # an existing `.env` keeps its mode
    for p in readable:
        p.chmod(0o644)
    try:
        yield {"tag": tag, "env": {k: str(v) for k, v in files.items()} | {"SYNEDRE_STATE_DIR": str(state)},
               "files": [*files.values(), dotenv], "readable": readable, "state": state}
    finally:
        shutil.rmtree(conf)
        shutil.rmtree(default_state if made_state else state, ignore_errors=True)
        if made:
            dotenv.unlink()


def test_the_agents_bash_and_read_tools_cannot_read_the_fleets_configuration_keys_or_checkout(
        services, fleet_files, tmp_path):
    tag, url = fleet_files["tag"], services["db"]
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "preprod", str(repo))
    git(repo, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-q", "--allow-empty", "-m", "init")
    code = synedre.ROOT / "synedre" / "config.py"
    targets = [*map(str, fleet_files["files"]), str(code)]
    agent = os.environ.get("SYNEDRE_AGENT_USER", "synedre-agent")
    if os.geteuid() == 0:  # the file modes let the agent's user read them, outside the sandbox
        for path in [*map(str, fleet_files["readable"]), str(code)]:
            subprocess.run(["setpriv", f"--reuid={agent}", f"--regid={agent}", "--clear-groups", "cat", path],
                           check=True, capture_output=True, timeout=30)
    tries = [b for path in targets for b in (bash(f"cat {path}"), py_read(path), read(path))]
    tries += [bash(f"ls {synedre.ROOT}/synedre"), {"type": "tool_use", "name": "Grep",
                                                   "input": {"pattern": "class Settings", "path": str(code.parent)}}]
    own = f"printf 'OWN-{tag}' > own.txt && printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\" && pwd"

    class Script(PerLaunch):
        """Step 0 writes its own file and says where its workspace is; step 1 reads that file
        the three ways (the control), then tries the fleet's files the same ways."""

        def for_request(self, body):  # noqa: ANN001, ANN201 - the scripted API's hook
            step = assistant_turns(body)
            if step == 0:
                return _One([bash(own)])
            if step == 1:
                ws = result_text(body).strip().splitlines()[-1]
                return _One([bash("cat own.txt"), py_read("own.txt"), read(f"{ws}/own.txt"), *tries])
            return _One([text("done")])

    mid, = make_launchable(url, tmp_path)
    output = run_launches(services, Script(lambda _: ScriptedModel([])), [mid], SYNEDRE_WORKSPACE_REPO=str(repo),
                          **fleet_files["env"])
    done = calls(events_of(url, mid))
    assert len(done) == 1 + 3 + len(tries), (done, output[-3000:])
    (_, _, where, _), checks, attempts = done[0], done[1:4], done[4:]
    assert Path(where.strip()).is_relative_to(fleet_files["state"])  # its workspace: inside the checkout
    # the control: its own file, by the same three ways, inside the denied checkout
    assert [(f"OWN-{tag}" in r, err) for *_, r, err in checks] == [(True, False)] * 3, checks
    # every read of the fleet's files fails, by Bash (cat, python) and by the Read and Grep tools
    assert [(n, i, r) for n, i, r, err in attempts if not err] == []
    markers = [f"MAILBOXES-{tag}", f"POLICY-{tag}", f"FLOWER-{tag}", f"DOTENV-{tag}", "class Settings"]
    assert [r for *_, r, _ in attempts if any(m in r for m in markers)] == []
    # Bash's reads were refused by the sandbox (no such file, or a file it cannot open), the
    # file tools' by the block outside the working directories
    for name, inp, result, _ in attempts:
        if name == "Bash" and not inp["command"].startswith("ls"):
            assert "No such file" in result or "Permission denied" in result, (inp, result)
        elif name in ("Read", "Grep"):
            assert "blockFileToolReadsOutsideWorkingDirectories" in result, (inp, result)
    (recorded,), = q(url, "SELECT sandbox FROM synedre.launches WHERE message_id = %s", mid)
    denied = recorded["sandbox"]["filesystem"]["denyRead"]
    assert {str(synedre.ROOT), *fleet_files["env"].values()} <= set(denied)


def test_the_preflight_starts_bubblewrap_inside_the_launchs_own_tmp_and_refuses_a_launch_without_one(tmp_path):
    """What the spawn stage checks before any agent process: a launch whose own /tmp cannot be
    made (here: its home's `tmp` replaced by a link) ends `sandbox_unavailable`, never runs
    with the host's /tmp."""
    from synedre.spawn import launcher, sandbox, workspace

    run_as = launcher.RunAs.lookup(os.environ.get("SYNEDRE_AGENT_USER", "synedre-agent")) \
        if os.geteuid() == 0 else None
    mine = workspace.traversable_dir(tmp_path / "agent" / "1")
    home = mine / "home"
    for d in (home, home / "tmp"):
        workspace.agent_dir(d, run_as) if run_as else workspace.private_dir(d)
    path = os.environ["PATH"]
    assert sandbox.preflight(path, run_as, launcher.Apart(home / "tmp", (mine,))) is None
    (home / "link").symlink_to(home / "tmp")
    refused = sandbox.preflight(path, run_as, launcher.Apart(home / "link", (mine,)))
    assert refused is not None and "launcher.Apart" in refused
