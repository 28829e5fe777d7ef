"""Launch failures in words (issue 27): the real `claude` CLI against a Messages API that
refuses it (404 model_not_found, 401, 429, 529). Each launch's reason, in `synedre launches`,
`synedre inspect` and the founder's alert, names the failure with the CLI's own line, where
it used to say `result:success:is_error=True`."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import psycopg
import pytest

from synedre.config import Settings
from synedre.stages.poll import ingest_one
from tests.conftest import CORPUS
from tests.services import stack
from tests.services.claude_api import ApiError, PerLaunch, ScriptedModel, start_claude_api
from tests.services.smtp import start_smtp
from tests.services.stack import q
from tests.spawn.test_launch_e2e import SECRETS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed")]

# tag in the request -> (what the API answers, the words each view must show)
REFUSALS = {
    "ERR404": (ApiError(404, "not_found_error", "model: claude-sonnet-4-5"),
               "model not found: There's an issue with the selected model"),
    "ERR401": (ApiError(401, "authentication_error", "invalid x-api-key"),
               "authentication: Invalid API key"),
    "ERR429": (ApiError(429, "rate_limit_error", "Number of requests has exceeded your rate limit"),
               "rate limit: API Error: Request rejected (429)"),
    "ERR529": (ApiError(529, "overloaded_error", "Overloaded"), "overloaded: API Error: 529 Overloaded"),
}


def launchable(url, tmp_path, tag: str) -> int:
    """A run waiting for its launch, its request tagged so the scripted API knows which refusal."""
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    raw = raw.replace(b"Message-ID: <", f"Message-ID: <{tag}.".encode(), 1).replace(b"SYN-CASE-P02", tag.encode())
    mid = ingest_one(raw, "atlas", 1, int(time.time() * 1000) % 10**9, Settings(state_dir=tmp_path), lambda _: None)
    with psycopg.connect(url, autocommit=True) as conn:
        run = conn.execute("INSERT INTO synedre.runs (ref_type, ref_id, title, complexity) VALUES"
                           " ('atlas_inbox', %s, 't', 'leger') RETURNING id", (str(mid),)).fetchone()[0]
        conn.execute("UPDATE synedre.email_states SET status = 'materialized', intent = 'run', complexity = 'leger',"
                     " confidence = 0.9, rationale = 'r', run_id = %s WHERE message_id = %s", (run, mid))
    return mid


def test_each_refusal_of_the_api_is_named_in_launches_inspect_and_the_alert(services, tmp_path):
    url = services["db"]
    repo = stack.site_repo(tmp_path / "repo")
    smtp = start_smtp()
    api = start_claude_api(PerLaunch(lambda first: next(
        ScriptedModel([refusal]) for tag, (refusal, _) in REFUSALS.items() if tag in first)))
    env = {**services["env"], **stack.mailbox_env(services["dovecot"], tmp_path, smtp=smtp),
           "SYNEDRE_CLAUDE_BIN": shutil.which("claude"),
           "SYNEDRE_ANTHROPIC_BASE_URL": api.url, "SYNEDRE_ANTHROPIC_API_KEY": SECRETS[1],
           "SYNEDRE_WORKSPACE_REPO": str(repo), "SYNEDRE_AGENT_API_RETRIES": "0",
           "SYNEDRE_IDLE_TIMEOUT_S": "60", "SYNEDRE_LAUNCH_BUDGET_S": "120"}
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", str(CORPUS / "directory.json")],
                   env=env, check=True, timeout=60, cwd=stack.ROOT, capture_output=True)
    ids = {tag: launchable(url, tmp_path, tag) for tag in REFUSALS}
    workers = stack.celery_workers(env, services["logs"], ("spawn", 2), ("deploy,recap", 2))
    try:
        from tasks.app import app
        for mid in ids.values():
            app.send_task("synedre.spawn", args=[mid])
        alerts = smtp.wait_for(len(ids), timeout=240)
    finally:
        stack.stop_all(workers, graceful=True)  # the alerts' tasks record what they sent
        api.stop()
        smtp.stop()
    assert {r.status for r in api.main_requests()} == {404, 401, 429, 529}  # each answered as scripted

    env = {k: v for k, v in env.items() if k != "COLUMNS"}  # piped: whole lines
    listed = subprocess.run([sys.executable, "-m", "synedre.cli", "launches"], env=env, cwd=stack.ROOT,
                            capture_output=True, text=True, timeout=60, check=True).stdout
    texts = [a.message.get_body(("plain",)).get_content().replace("\r\n", "\n") for a in alerts]
    for tag, (_, words) in REFUSALS.items():
        mid = ids[tag]
        assert q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid) == [("spawn_failed",)]
        reason = q(url, "SELECT stop_reason FROM synedre.launches WHERE message_id = %s", mid)[0][0]
        assert reason.startswith(words) and "is_error" not in reason, (tag, reason)
        line = next(row for row in listed.splitlines() if row.split()[:2] == [str(q(
            url, "SELECT id FROM synedre.launches WHERE message_id = %s", mid)[0][0]), str(mid)])
        assert words in line, (tag, line)
        shown = subprocess.run([sys.executable, "-m", "synedre.cli", "inspect", str(mid)], env=env, cwd=stack.ROOT,
                               capture_output=True, text=True, timeout=60, check=True).stdout
        assert f"failed ({words}" in shown, (tag, shown)
        alert = [t for t in texts if f"Lancement arrêté : {reason}\n" in t]
        assert len(alert) == 1, (tag, texts)
