"""Resume (issue 16, item 1), end to end: real Celery spawn workers, the real `claude` CLI under
a pty, the scripted Messages API, a real git repository, PostgreSQL and Redis.

A launch stopped by the idle timeout (125) goes on once in its session (`--resume`), in the
same claim, launch row and event stream; one stopped by the hard timeout (124) is resumed by
hand (`synedre launch resume`). The session store lives in the launch's own agent home,
private to it, and goes once no resume can need it."""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from synedre.spawn import session
from tests.services import stack
from tests.services.claude_api import ScriptedModel, Sleep, bash
from tests.spawn.conftest import git
from tests.spawn.test_launch_e2e import CONTRACT, finished, launch_env, make_launchable, q, repo  # noqa: F401

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed "
                                 "(scripts/install-claude-cli)")]
RESUMED = "[Synedre] Your previous run of this task was stopped by the"
EARLY = "f=early-$(basename $PWD).txt && pwd > $f && git add $f && git commit -qm 'early commit'"
# contract and last commit in one step: a resumed conversation may come back one step later
FINISH = (f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\" && f=fix-$(basename $PWD).txt && pwd > $f"
          " && git add $f && (git commit -qm 'agent commit' || true)")


def one_stream(url, state: Path, launch_id: int) -> list[dict]:
    """The launch's events: one stream, its seq unbroken across runs, the NDJSON file the same."""
    rows = q(url, "SELECT seq, event_type, subtype, payload FROM synedre.launch_events WHERE launch_id = %s"
                  " ORDER BY seq", launch_id)
    assert [r[0] for r in rows] == list(range(len(rows))) and len(rows) > 10
    files = list(state.rglob("events.ndjson"))
    assert files == [state / "launches" / str(launch_id) / "events.ndjson"]
    lines = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert [x.get("type") for x in lines] == [r[1] for r in rows]
    return [r[3] for r in rows]


def resumed_request(api, session_id: str):
    """The scripted API's view: one session all along, and the first request of the resumed
    run carries the first run's conversation before the resume's own words."""
    main = api.main_requests()
    assert {r.headers.get("x-claude-code-session-id") for r in main} == {session_id}
    first = next(r for r in main if RESUMED in json.dumps(r.body["messages"]))
    at = next(i for i, m in enumerate(first.body["messages"]) if RESUMED in json.dumps(m))
    replayed = json.dumps(first.body["messages"][:at])
    assert "early commit" in replayed and "tool_result" in replayed
    return first.body["messages"][at]


def audits(url, mid) -> list[tuple[str, dict]]:
    return q(url, "SELECT event, detail FROM synedre.audit_log WHERE message_id = %s ORDER BY id", mid)


def assert_private_store(state: Path, launch_id: int, session_id: str) -> Path:
    """The store in the launch's own home, 0700 all along, owned by the agent's user, nothing
    in it open to the group or others; the transcript there."""
    home = state / "agent" / str(launch_id) / "home"
    store = session.store(home)
    owner = pwd.getpwnam("synedre-agent").pw_uid if os.geteuid() == 0 else os.geteuid()
    for d in (home, store):
        st = d.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_mode & 0o777 == 0o700 and st.st_uid == owner, (d, oct(st.st_mode))
    transcript, = store.glob(f"projects/*/{session_id}.jsonl")
    assert transcript.stat().st_uid == owner
    loose = [f"{p.lstat().st_mode & 0o777:o} {p}" for p in store.rglob("*")
             if not p.is_symlink() and p.lstat().st_mode & 0o077]
    assert loose == []
    return store


def test_a_silent_agent_is_stopped_resumed_once_in_its_session_and_finishes(services, launch_env, repo, tmp_path):  # noqa: F811
    url, state = services["db"], tmp_path / "state"
    mid, = make_launchable(url, tmp_path)
    api, env = launch_env(ScriptedModel([[bash(EARLY)], Sleep(30, once=True), [bash(FINISH)], [bash(FINISH)]]),
                          SYNEDRE_IDLE_TIMEOUT_S="6")  # a loaded CLI starts within it
    worker = stack.spawn_one(env, services["logs"], mid, lambda: finished(url, 1), 90, "the launch to end")
    # stopped by the idle timeout, then resumed in the same process of the launch
    assert "stop_reason=idle" in worker.output() and "exit_code=125" in worker.output()
    (launch_id, status, stop, code, session_id, attempt), = q(
        url, "SELECT id, status, stop_reason, exit_code, session_id, attempt FROM synedre.launches")
    assert (status, stop, code, attempt) == ("succeeded", "success", 0, 1)
    assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("spawned",)]
    events = [e for e, _ in audits(url, mid)]
    assert events.count("spawn_started") == 1 and events[-1] == "spawn_action_done"
    (detail,), = [[d] for e, d in audits(url, mid) if e.startswith("spawn_resume")]
    assert detail | {"launch_id": launch_id} == detail and (detail["after"], detail["by"]) == ("idle", "auto")
    assert "spawn_resumed" in events
    # one stream: both processes' events, one session
    payloads = one_stream(url, state, launch_id)
    inits = [p for p in payloads if (p.get("type"), p.get("subtype")) == ("system", "init")]
    assert len(inits) == 2 and {p["session_id"] for p in inits} == {session_id}
    assert payloads[-1]["type"] == "result" and payloads[-1]["subtype"] == "success"
    resumed_request(api, session_id)
    assert git(repo, "log", "preprod", "--format=%s").split("\n")[:2] == ["agent commit", "early commit"]
    # the store: private, nowhere in the database
    store = assert_private_store(state, launch_id, session_id)
    transcript, = store.glob(f"projects/*/{session_id}.jsonl")
    token = (state / "launches" / str(launch_id) / session.TOKEN_NAME).read_text()
    assert f"<<<COVER {token}>>>" in transcript.read_text()  # the request, as the session keeps it...
    dump = json.dumps([q(url, "SELECT * FROM synedre.launch_events"), q(url, "SELECT * FROM synedre.launches"),
                       q(url, "SELECT * FROM synedre.audit_log")], default=str)
    ndjson = (state / "launches" / str(launch_id) / "events.ndjson").read_text()
    assert token not in dump and token not in ndjson and str(transcript) not in dump + ndjson  # ...only there
    # kept while the message may still need it, gone once it reached `actioned` (the sweep)
    from tasks.sweep import sweep
    sweep()
    assert store.exists()
    with __import__("psycopg").connect(url, autocommit=True) as conn:
        conn.execute("UPDATE synedre.email_states SET status = 'actioned' WHERE message_id = %s", (mid,))
    sweep()
    assert not store.exists() and not (state / "launches" / str(launch_id) / session.TOKEN_NAME).exists()
    assert (state / "agent" / str(launch_id) / "home").is_dir()  # the rest of the home is not the store's


def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=stack.ROOT)


def test_launch_resume_continues_a_hard_timed_out_launch_in_its_session(services, launch_env, repo, tmp_path):  # noqa: F811
    url, state = services["db"], tmp_path / "state"
    mid, = make_launchable(url, tmp_path)
    # never idle, and busy past the hard limit: 6 s from the CLI's start, so that its session id
    # (what makes the launch resumable) is in even where the CLI takes 3 s to start
    busy = [step for i in range(16) for step in ([bash(f"echo turn {i}")], Sleep(0.5))]
    api, env = launch_env(ScriptedModel([[bash(EARLY)], *busy, [bash(FINISH)], [bash(FINISH)]]))
    from tasks.app import app
    stack.spawn_one({**env, "SYNEDRE_HARD_TIMEOUT_S": "6"}, services["logs"], mid, lambda: finished(url, 1), 60,
                    "the hard-limited launch to stop")
    (launch_id, code, stop, salvage, session_id), = q(
        url, "SELECT id, exit_code, stop_reason, salvage, session_id FROM synedre.launches")
    assert (code, stop, salvage["resumable"]) == (124, "hard", True)  # never resumed on its own
    assert "spawn_resumed" not in [e for e, _ in audits(url, mid)]
    store = assert_private_store(state, launch_id, session_id)
    assert session.prune(state, 72.0) == [] and store.exists()  # a resumable failure keeps its session

    # a copy that finds the slot or lock of the resume just ended still held comes back soon
    worker = stack.celery_worker({**env, "SYNEDRE_SPAWN_SLOT_RETRY_S": "2"}, services["logs"], queues="spawn")
    try:
        out = cli(env, "launch", "resume", str(mid))
        assert out.returncode == 0 and f"launch #{launch_id} (stopped: hard) enqueued" in out.stdout, out
        stack.wait_for(lambda: q(url, "SELECT 1 FROM synedre.launches WHERE attempt = 2 AND status <> 'running'"),
                       60, "the resumed launch to end", interval=0.5)
        # a copy of the task (a redelivery) finds a later attempt: nothing runs twice
        app.send_task("synedre.spawn_resume", args=[mid, launch_id, 1])
        stack.wait_for(lambda: "not resumed" in worker.output(), 60, "the copy refused")
    finally:
        worker.stop()
    (status, stop, attempt), = q(url, "SELECT status, stop_reason, attempt FROM synedre.launches")
    assert (status, stop, attempt) == ("succeeded", "success", 2)  # the same row, its attempt moved on
    assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("spawned",)]
    events = [e for e, _ in audits(url, mid)]
    assert events.count("spawn_started") == 1 and events.count("spawn_resumed") == 1
    assert events.index("spawn_failed") < events.index("spawn_resumed") < events.index("spawn_action_done")
    assert dict(audits(url, mid))["spawn_resumed"] | {"after": "hard", "by": "operator", "launch_id": launch_id} \
        == dict(audits(url, mid))["spawn_resumed"]
    payloads = one_stream(url, state, launch_id)
    assert len([p for p in payloads if p.get("subtype") == "init"]) == 2
    assert "hard timeout" in json.dumps(resumed_request(api, session_id))
    assert "agent commit" in git(repo, "log", "preprod", "--format=%s")
    # nothing left to resume: refused, in one line, exit 1
    again = cli(env, "launch", "resume", str(mid))
    assert again.returncode == 1 and "not resumable" in again.stderr and again.stderr.count("\n") == 1, again
    # past the retention, the sweep's prune removes a store the message might still have used
    assert session.prune(state, 72.0) == [] and store.exists()
    with __import__("psycopg").connect(url, autocommit=True) as conn:
        conn.execute("UPDATE synedre.launches SET ended_at = now() - interval '73 hours' WHERE id = %s", (launch_id,))
    assert session.prune(state, 72.0) == [launch_id] and not store.exists()


def second_token(state: Path) -> str:
    return (state / "launches" / "2" / session.TOKEN_NAME).read_text()


def test_another_launchs_agent_cannot_read_a_session_store(services, launch_env, repo, tmp_path):  # noqa: F811
    url, state = services["db"], tmp_path / "state"
    first, second = make_launchable(url, tmp_path, n=2)
    api, env = launch_env(ScriptedModel([[bash(FINISH)]]))
    stack.spawn_one(env, services["logs"], first, lambda: finished(url, 1), 60, "the first launch")
    (launch_id, session_id), = q(url, "SELECT id, session_id FROM synedre.launches")
    store = assert_private_store(state, launch_id, session_id)
    transcript, = store.glob(f"projects/*/{session_id}.jsonl")
    token = (state / "launches" / str(launch_id) / session.TOKEN_NAME).read_text()
    assert f"<<<COVER {token}>>>" in transcript.read_text()
    read = {"type": "tool_use", "name": "Read", "input": {"file_path": str(transcript)}}
    glob = {"type": "tool_use", "name": "Grep", "input": {"pattern": token, "path": str(store)}}
    api, env = launch_env(ScriptedModel([[bash(f"cat {transcript}; ls -R {store}; echo RC=$?")], [read], [glob],
                                         [bash(FINISH)]]))
    stack.spawn_one(env, services["logs"], second, lambda: finished(url, 2), 60, "the second launch")
    # the first session's request (its fence token) reached nothing the second agent sent on
    sent = json.dumps([r.body for r in api.main_requests()])
    assert set(re.findall(r"<<<COVER ([0-9a-f]{32})>>>", sent)) == {second_token(state)} != {token}
    results = [b for r in api.main_requests()[-1:] for m in r.body["messages"] if m["role"] == "user"
               and isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]
    # Bash: the sandbox hides the state directory; Read and Grep: outside the working directories
    assert "No such file or directory" in json.dumps(results[0]) and "RC=2" in json.dumps(results[0]), results[0]
    assert all(b.get("is_error") and "blockFileToolReadsOutsideWorkingDirectories" in json.dumps(b)
               for b in results[1:3]), results
    assert transcript.is_file()


def test_an_idle_stop_is_not_resumed_once_the_message_reached_its_spending_cap(services, launch_env, tmp_path):  # noqa: F811
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    api, env = launch_env(ScriptedModel([[bash(EARLY)], Sleep(30, once=True), [bash(FINISH)]]),
                          SYNEDRE_IDLE_TIMEOUT_S="6", SYNEDRE_MAX_MESSAGE_COST_USD="20")
    worker = stack.celery_worker(env, services["logs"], queues="spawn")
    try:
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: len(api.main_requests()) >= 2, 60, "the agent's silent turn")
        with __import__("psycopg").connect(url, autocommit=True) as conn:  # spent meanwhile, as far as we know
            conn.execute("UPDATE synedre.launches SET cost_usd = 25 WHERE message_id = %s", (mid,))
        stack.wait_for(lambda: finished(url, 1), 60, "the launch to end", interval=0.5)
    finally:
        worker.stop()
    (status, stop, code, salvage), = q(url, "SELECT status, stop_reason, exit_code, salvage FROM synedre.launches")
    assert (status, stop, code, salvage["resumable"]) == ("failed", "idle", 125, True)
    skipped = [d for e, d in audits(url, mid) if e == "spawn_resume_skipped"]
    assert len(skipped) == 1 and "message cost 25" in skipped[0]["reason"], audits(url, mid)
    assert "spawn_resumed" not in [e for e, _ in audits(url, mid)]
    assert not any(RESUMED in json.dumps(r.body) for r in api.main_requests())


def test_a_store_gone_from_the_host_that_ran_its_launch_is_told_from_one_on_another_host(tmp_path):
    state = tmp_path / "state"
    assert not session.gone(state, 7, "sid")  # never here: another host ran it
    transcript = session.store(session.home_of(state, 7)) / "projects" / "-w" / "sid.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text("{}\n")
    assert session.has_session(state, 7, "sid") and not session.gone(state, 7, "sid")
    assert session.local_launches(state) == [7]
    assert session.remove(state, 7) and not session.remove(state, 7)
    assert session.gone(state, 7, "sid") and session.local_launches(state) == []
