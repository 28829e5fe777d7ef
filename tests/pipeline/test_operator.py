"""An operator sees why a message failed and sends it back once the cause is fixed, with
real workers, clamd, Dovecot and a scripted Mistral API (the `synedre` CLI as he types it)."""
import json
import subprocess
import sys

import psycopg
import pytest

from tests.conftest import CORPUS
from tests.services import stack
from tests.services.clamd import start_clamd
from tests.services.stack import q

pytestmark = pytest.mark.timeout(300)
WITH_ATTACHMENT = "P07-founder-screenshot-false-noise.eml"  # a screenshot, founder, DKIM-signed
PLAIN = next(p.name for p in (CORPUS / "cases").glob("P01-*.eml"))


def cli(env, *args, check=True):
    out = subprocess.run([sys.executable, "-m", "synedre.cli", *args], env=env, capture_output=True, text=True,
                         timeout=90, cwd=stack.ROOT)
    if check and out.returncode != 0:
        raise AssertionError(f"synedre {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def status_of(url, mid):
    return q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid)[0][0]


@pytest.fixture
def workers(services, case_llm, tmp_path, monkeypatch):
    """poll, scan+ocr, classify+materialize workers; clamd and the LLM key come and go."""
    clamd_dir = tmp_path / "clamd"
    clamd = start_clamd(clamd_dir)
    keys = tmp_path / "keys"
    keys.mkdir()
    env = {**services["env"], "SYNEDRE_CLAMD": str(clamd.socket_path), "SYNEDRE_AI_KEYS_DIR": str(keys),
           "SYNEDRE_MISTRAL_SERVER_URL": case_llm.url, "SYNEDRE_LLM_RETRIES": "1", "SYNEDRE_LLM_RETRY_BASE_S": "1"}
    env.pop("SYNEDRE_MISTRAL_API_KEY", None)
    cli(env, "directory", "import", str(CORPUS / "directory.json"))
    logs, procs = services["logs"], []
    try:
        procs += stack.celery_workers(env, logs, ("poll", 2), ("scan,ocr", 2), ("classify,materialize", 4, "threads"))
        yield {**services, "env": env, "clamd": clamd, "clamd_dir": clamd_dir, "keys": keys, "procs": procs}
    finally:
        stack.stop_all(procs)
        clamd.stop()


def deliver(w, name):
    with w["dovecot"].client() as c:
        c.append("INBOX", (CORPUS / "cases" / name).read_bytes())
    before = {r[0] for r in q(w["db"], "SELECT id FROM synedre.raw_messages")}
    cli(w["env"], "poll", "atlas")
    stack.wait_for(lambda: {r[0] for r in q(w["db"], "SELECT id FROM synedre.raw_messages")} - before, 60, "ingested")
    return max({r[0] for r in q(w["db"], "SELECT id FROM synedre.raw_messages")} - before)


def test_scanner_down_then_back_the_operator_sees_why_and_retries(workers):
    w = workers
    w["clamd"].stop()  # the scanner is down: fail closed, and say so
    mid = deliver(w, WITH_ATTACHMENT)
    stack.wait_for(lambda: status_of(w["db"], mid) == "blocked_unsafe_attachment", 60, "blocked")
    shown = cli(w["env"], "inspect", str(mid)).stdout
    assert "classify_blocked_unsafe_attachments" in shown and "scanner error" in shown
    detail = json.loads(cli(w["env"], "inspect", str(mid), "--json").stdout)
    reason = next(a for a in detail["audit"] if a["event"] == "classify_blocked_unsafe_attachments")["detail"]["reason"]
    assert "scanner error" in reason and str(w["clamd"].socket_path.name) in reason

    w["clamd"] = start_clamd(w["clamd_dir"])
    (w["keys"] / "mistral").write_text("test-key-not-secret")
    out = cli(w["env"], "retry", "--status", "blocked_unsafe_attachment", "--reason", "clamd back")
    assert f"message {mid}: blocked_unsafe_attachment -> received, enqueued for scan" in out.stdout
    stack.wait_for(lambda: status_of(w["db"], mid) == "materialized", 90, "scanned clean and on to materialized")
    verdicts = q(w["db"], "SELECT verdict FROM synedre.attachments WHERE message_id = %s", mid)
    assert verdicts == [("clean",)]
    events = [e for (e,) in q(w["db"], "SELECT event FROM synedre.audit_log WHERE message_id = %s ORDER BY id", mid)]
    assert events.index("retry_requested") < events.index("scanned") < events.index("classified")
    assert q(w["db"], "SELECT detail->>'reason' FROM synedre.audit_log WHERE event = 'retry_requested'") == \
        [("clamd back",)]


def test_no_llm_key_then_key_set_the_operator_retries_classify_failed(workers):
    w = workers
    mid = deliver(w, PLAIN)
    stack.wait_for(lambda: status_of(w["db"], mid) == "classify_failed", 90, "classify_failed without a key")
    detail = json.loads(cli(w["env"], "inspect", str(mid), "--json").stdout)
    failed = next(a for a in detail["audit"] if a["event"] == "classify_failed")["detail"]
    assert failed["reason"] == "llm_unavailable" and "no key" in failed["detail"]
    assert any(a["event"] == "classify_retry" for a in detail["audit"])  # retry 1/1 was recorded

    (w["keys"] / "mistral").write_text("test-key-not-secret")
    cli(w["env"], "retry", str(mid), "--reason", "key set")
    stack.wait_for(lambda: status_of(w["db"], mid) == "materialized", 60, "classified once the key is there")


def test_stage_calls_on_the_wrong_message_say_why_and_change_nothing(workers):
    w = workers
    (w["keys"] / "mistral").write_text("test-key-not-secret")
    mid = deliver(w, PLAIN)
    stack.wait_for(lambda: status_of(w["db"], mid) == "materialized", 60, "materialized")
    from synedre.runner import Skip
    from synedre.stages import classify as classify, scan as scan

    assert scan.run(mid) == Skip("already past scan (status materialized)", moved_on=True)
    assert classify.run(999999) == Skip("no such message")
    nosuch = cli(w["env"], "poll", "nosuch", check=False)
    assert nosuch.returncode != 0 and "unknown mailbox 'nosuch'" in nosuch.stderr
    tail = cli(w["env"], "tail", str(mid), check=False)
    assert tail.returncode == 1 and "has no launch" in tail.stderr
    again = cli(w["env"], "retry", str(mid), "--from", "classify", "--reason", "reclassify")
    assert "materialized -> read, enqueued for classify" in again.stdout
    stack.wait_for(lambda: status_of(w["db"], mid) == "materialized", 60, "materialized again")
    with psycopg.connect(w["db"], autocommit=True) as c:  # as if its launch had succeeded
        c.execute("UPDATE synedre.email_states SET status = 'spawned' WHERE message_id = %s", (mid,))
    for stage in ([], ["--from", "spawn"], ["--from", "classify"]):
        refused = cli(w["env"], "retry", str(mid), *stage, "--reason", "again", check=False)
        assert refused.returncode == 1 and "never repeated" in refused.stderr, (stage, refused.stderr)
    assert status_of(w["db"], mid) == "spawned"
