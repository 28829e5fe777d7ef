"""The 22 corpus cases end to end: Dovecot, clamd, Tesseract, Celery, a scripted Mistral API."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from synedre.pipeline import TERMINAL, Status
from tests.conftest import CORPUS
from tests.services import stack
from tests.services.stack import q

pytestmark = pytest.mark.timeout(300)
CASES = json.loads((CORPUS / "cases.json").read_text())
STAGES = ["scan", "ocr", "classify", "materialize"]
QUEUES = ["poll", *STAGES, "spawn"]


def settled(url) -> bool:
    """Every message has gone as far as this release takes it."""
    # the spawn queue has no worker here: materialized is as far as these messages go
    done = [str(s) for s in TERMINAL | {Status.MATERIALIZED}]
    (pending,), = q(url, "SELECT count(*) FROM synedre.email_states s WHERE NOT s.status = ANY(%s)", done)
    return pending == 0


def idle(redis) -> bool:
    """No task waiting nor running (acks_late: a running task is still unacknowledged)."""
    return all(redis.llen(name) == 0 for name in QUEUES if name != "spawn") and redis.hlen("unacked") == 0


def run_corpus(p) -> dict[str, dict]:
    with p["dovecot"].client() as c:
        for case in CASES:
            c.append("INBOX", (CORPUS / "cases" / case["file"]).read_bytes())
    from tasks.app import app
    app.send_task("synedre.poll", args=["atlas"])
    stack.wait_for(lambda: q(p["db"], "SELECT count(*) FROM synedre.email_states")[0][0] == len(CASES),
                   60, "22 messages ingested")
    stack.wait_for(lambda: settled(p["db"]), 180, "every message settled", interval=0.2)
    stack.wait_for(lambda: idle(p["redis"]), 60, "queues drained", interval=0.2)
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "inspect", "--all", "--json"],
                         env=p["env"], capture_output=True, timeout=60, check=True, cwd=stack.ROOT)
    by_case = {}
    for m in json.loads(out.stdout):
        raw, = q(p["db"], "SELECT raw FROM synedre.raw_messages WHERE id = %s", m["id"])[0]
        by_case[re.search(rb"SYN-CASE-(P\d+)", bytes(raw)).group(1).decode()] = m
    return by_case


def snapshot(url):
    return [q(url, f"SELECT * FROM synedre.{t} ORDER BY 1") for t in
            ("email_states", "runs", "questions", "negotiations", "advices", "attachments")] + \
           [q(url, "SELECT message_id, event, detail FROM synedre.audit_log ORDER BY id")]


def test_corpus_end_to_end(pipeline):
    p = pipeline
    result = run_corpus(p)
    assert sorted(result) == sorted(c["id"] for c in CASES)
    llm = p["llm"].script
    assert llm.unexpected == []
    for case in CASES:
        cid, exp, got = case["id"], case["expect"], result[case["id"]]
        where = f"{cid} ({case['note']})"
        assert (cid in llm.calls) == exp["llm_called"], where
        if "status_family" in exp:
            assert got["status"] == exp["status_family"], where
            assert got["materialized"] is None, where
        if "intent" in exp:
            assert got["intent"] == exp["intent"], where
            assert got["status"] == ("noise" if exp["intent"] == "noise" else "materialized"), where
            kind = None if exp["intent"] == "noise" else exp["intent"]
            assert (got["materialized"] or {}).get("kind") == kind, where
        if "complexity" in exp:
            assert got["complexity"] == exp["complexity"], where
        if "materialized" in exp:
            assert got["materialized"]["kind"] == exp["materialized"], where
        if "client" in exp:
            assert got["client"]["codename"] == exp["client"], where
        if "client_source" in exp:
            assert got["client"]["source"] == exp["client_source"], where
        for event in exp.get("audits", []):
            assert event in got["audits"], where
        for event in exp.get("audits_absent", []):
            assert event not in got["audits"], where
        prompts = ["\n".join(m["content"] for m in body["messages"]) for body in llm.calls.get(cid, [])]
        for word in exp.get("ocr_text_seen_by_llm", []):
            assert prompts and all(word in re.search(r"<<<IMAGE_TEXT (\w+)>>>(.*)<<<END IMAGE_TEXT \1>>>",
                                                     t, re.S).group(2) for t in prompts), where
        if exp.get("body_fenced"):
            for body in llm.calls[cid]:
                system, user = body["messages"][0]["content"], body["messages"][1]["content"]
                token = re.search(r"<<<COVER (\w{32})>>>", user).group(1)
                assert token in system  # the model is told this call's token
                inside = re.search(rf"<<<COVER {token}>>>\n(.*?)\n<<<END COVER {token}>>>", user, re.S).group(1)
                assert "Ignore all previous instructions" in inside and "USER_EMAIL_BODY_END" in inside
                outside = user.replace(inside, "")
                assert "Ignore all previous instructions" not in outside
        # retried exactly once on an invalid answer, never more
        assert len(llm.calls.get(cid, [])) <= 2, where
    # OCR text and attachment files are gone once classification ended
    attachments_root = Path(p["env"]["SYNEDRE_STATE_DIR"]) / "attachments"
    assert attachments_root.is_dir() and not list(attachments_root.iterdir())
    audits = q(p["db"], "SELECT detail::text FROM synedre.audit_log")
    assert not any("checkout" in d.lower() for d, in audits)  # OCR text never stored
    for w in p["workers"]:
        assert w.alive() and "Traceback" not in w.output(), w.output()[-3000:]

    # (2) re-running every stage of every message with `celery call` changes nothing
    before = snapshot(p["db"])
    ids = [m["id"] for m in result.values()]
    subprocess.run([sys.executable, "-m", "celery", "-A", "tasks", "call", "synedre.classify",
                    "--args", json.dumps([ids[0]])], env=p["env"], check=True, timeout=60,
                   cwd=stack.ROOT, capture_output=True)
    from tasks.app import app
    for mid in ids:
        for stage in STAGES:
            app.send_task(f"synedre.{stage}", args=[mid])
    stack.wait_for(lambda: idle(p["redis"]), 120, "re-run stages drained", interval=0.2)
    assert snapshot(p["db"]) == before

    # (3) a duplicate delivery of every message materializes nothing more
    with p["dovecot"].client() as c:
        for case in CASES:
            c.append("INBOX", (CORPUS / "cases" / case["file"]).read_bytes())
    app.send_task("synedre.poll", args=["atlas"])
    stack.wait_for(lambda: q(p["db"], "SELECT count(*) FROM synedre.audit_log WHERE event = 'poll_duplicate'"
                             )[0][0] == len(CASES), 60, "duplicates seen")
    stack.wait_for(lambda: idle(p["redis"]), 60, "queues drained", interval=0.2)
    after = snapshot(p["db"])
    assert after[:-1] == before[:-1]
    assert {e for _, e, _ in after[-1][len(before[-1]):]} == {"poll_duplicate"}

    # (7) the calibration report counts what happened
    report = subprocess.run([sys.executable, "-m", "synedre.cli", "report", "calibration"],
                            env=p["env"], capture_output=True, text=True, timeout=60, check=True,
                            cwd=stack.ROOT).stdout
    counts = {}
    for case in CASES:
        if "intent" in case["expect"]:
            counts[case["expect"]["intent"]] = counts.get(case["expect"]["intent"], 0) + 1
    for intent, n in counts.items():
        assert re.search(rf"^\| {intent} \| {n} \|", report, re.M), (intent, n, report)
    print(report)
    failures = sum(1 for c in CASES if c["expect"].get("status_family"))
    assert re.search(rf"Total[^\n]*\b{failures}\b", report), report
