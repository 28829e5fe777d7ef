"""A follow-up inherits its client (issue 28, acceptance 7), through the real pipeline of
tests/approvals/test_steering_e2e.py: Dovecot, clamd, the scripted classifier, aiosmtpd, the
real `claude` CLI against the scripted Messages API, the founder's replies DKIM-signed.

The founder answers a recap of Garage Martin's work with a new instruction. His mail names no
client (it is his, quoting ours): it has the client of the message it follows, so its approval
request names Garage Martin, the policy sees a client that has had launches (not a first
launch), and its launch works in Garage Martin's own repository, never the fleet's default."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from synedre.config import Settings
from synedre.stages.poll import ingest_one
from tests.approvals.test_steering_e2e import (  # noqa: F401 - the fixtures
    WRITE_CONTRACT,
    deliver,
    dkim_key,
    events,
    msgid,
    q,
    reply,
    reply_row,
    request_mail,
    status,
    steer,
)
from tests.conftest import CORPUS
from tests.services import stack
from tests.services.claude_api import ScriptedModel, bash, text
from tests.spawn.conftest import git

pytestmark = [pytest.mark.timeout(300), pytest.mark.integration]

CLIENT = "garage-martin"  # P02's sender
PHONE = "printf 'tel\\n' > phone.txt && git add phone.txt && git commit -qm 'follow-up: phone field'"


def client_repository(s) -> str:
    """Garage Martin gets a repository of its own, through the directory file, as an operator
    sets it; the fleet's default repository stays the fixture's."""
    repo = s["tmp"] / "garage-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "preprod")
    (repo / "index.html").write_text("garage\n")
    git(repo, "add", "index.html")
    git(repo, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "garage site")
    directory = json.loads((CORPUS / "directory.json").read_text())
    for c in directory["clients"]:
        if c["codename"] == CLIENT:
            c["repo"] = str(repo)
    path = s["tmp"] / "directory.json"
    path.write_text(json.dumps(directory))
    imported = subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", str(path)], env=s["env"],
                              timeout=60, cwd=stack.ROOT, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    return str(repo)


def recapped(s, repo: str):
    """Garage Martin's request, done on its branch of its repository and recapped to the founder."""
    from synedre import db
    from synedre.mail import outbound
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes().replace(
        b"Message-ID: <", b"Message-ID: <follow-up.", 1)
    mid = ingest_one(raw, "atlas", 1, int(time.time() * 1000) % 10**9, Settings(state_dir=s["tmp"]), lambda _: None)
    branch = f"synedre/msg-{mid}-a1"
    git(repo, "branch", branch, "preprod")
    contract = {"ok": True, "tenant": None, "routes_to_qa": [], "commits": ["abc1234"],
                "summary_md": "Le formulaire de contact est réparé.", "draft_reply_for_user": None}
    with psycopg.connect(s["url"], autocommit=True) as conn:
        run = conn.execute("INSERT INTO synedre.runs (ref_type, ref_id, title, complexity) VALUES"
                           " ('atlas_inbox', %s, 't', 'leger') RETURNING id", (str(mid),)).fetchone()[0]
        conn.execute("UPDATE synedre.email_states SET status = 'actioned', intent = 'run', complexity = 'leger',"
                     " confidence = 0.9, run_id = %s, client_source = 'envelope',"
                     " client_id = (SELECT id FROM synedre.clients WHERE codename = %s) WHERE message_id = %s",
                     (run, CLIENT, mid))
        conn.execute("INSERT INTO synedre.launches (message_id, attempt, status, contract, branch)"
                     " VALUES (%s, 1, 'succeeded', %s, %s)", (mid, Jsonb(contract), branch))
    before = len(s["smtp"].messages())
    outbound.send_to_founder(db.transaction, "atlas", mid, "recap", subject="Recap",
                             text=f"Ce que l'agent a fait :\n{contract['summary_md']}")
    return mid, s["smtp"].wait_for(before + 1)[-1].message


@pytest.mark.policy("[first_launch]\nenabled = true\n\n[wide_tools]\nenabled = true\n")
@pytest.mark.agent(ScriptedModel([[bash(PHONE)], [bash(WRITE_CONTRACT)], [text("Done.")]]))
def test_a_follow_up_in_a_recap_s_thread_names_its_client_and_runs_in_its_repository(steer):  # noqa: F811
    s, url = steer, steer["url"]
    repo = client_repository(s)
    done, recap = recapped(s, repo)
    more = reply(s, recap, "Pouvez-vous aussi ajouter un champ téléphone ? SYN-CASE-P21")
    deliver(s, more)
    new_id = stack.wait_for(lambda: q(url, "SELECT s.message_id FROM synedre.email_states s JOIN"
                                           " synedre.raw_messages r ON r.id = s.message_id WHERE r.message_id = %s",
                                      msgid(more)), 30, "the follow-up ingested")[0][0]
    # his request mail: the client named, asked under a rule other than a first launch
    request = request_mail(s, new_id)
    assert q(url, "SELECT s.follows_message_id, c.codename, s.client_source FROM synedre.email_states s"
                  " JOIN synedre.clients c ON c.id = s.client_id WHERE s.message_id = %s", new_id) == \
        [(done, CLIENT, "follows")]
    (rule, facts), = q(url, "SELECT rule, facts FROM synedre.approvals WHERE message_id = %s", new_id)
    assert rule == "approval_rule_wide_tools" and facts["client"] == CLIENT  # not approval_rule_first_launch
    body = request.get_body(("plain",)).get_content()
    assert f"Client : {CLIENT}" in body and "inconnu" not in body
    classified = [d for e, d in events(url, new_id) if e == "classified"]
    assert classified and (classified[-1]["client"], classified[-1]["client_source"]) == (CLIENT, "follows")

    # his OK: the launch works on the followed branch, in the client's repository
    ok = reply(s, request, "OK")
    deliver(s, ok)
    reply_row(s, ok)
    stack.wait_for(lambda: q(url, "SELECT 1 FROM synedre.launches WHERE message_id = %s AND status <> 'running'",
                             new_id), 150, "the follow-up's launch", interval=0.5)
    assert q(url, "SELECT status, branch FROM synedre.launches WHERE message_id = %s", new_id) == \
        [("succeeded", f"synedre/msg-{done}-a1")], q(url, "SELECT stop_reason FROM synedre.launches")
    assert status(url, new_id) == "spawned"
    assert "follow-up: phone field" in git(repo, "log", "preprod", "--format=%s")  # merged there
    assert "follow-up: phone field" not in git(s["repo"], "log", "--all", "--format=%s")  # never the default
