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

import pytest

from tests.approvals.test_steering_e2e import (  # noqa: F401 - the fixtures
    WRITE_CONTRACT,
    deliver,
    dkim_key,
    events,
    msgid,
    q,
    recapped,
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
    repo = stack.site_repo(s["tmp"] / "garage-repo", "index.html", "garage\n", "garage site")
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


@pytest.mark.policy("[first_launch]\nenabled = true\n\n[wide_tools]\nenabled = true\n")
@pytest.mark.agent(ScriptedModel([[bash(PHONE)], [bash(WRITE_CONTRACT)], [text("Done.")]]))
def test_a_follow_up_in_a_recap_s_thread_names_its_client_and_runs_in_its_repository(steer):  # noqa: F811
    s, url = steer, steer["url"]
    repo = client_repository(s)
    # Garage Martin's request, done on its branch of its repository and recapped to the founder
    done, recap = recapped(s, "follow-up", "Le formulaire de contact est réparé.", repo, client=CLIENT,
                           client_source="envelope")
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
