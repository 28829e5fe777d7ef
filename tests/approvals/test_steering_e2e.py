"""The founder steers by replying (issue 17), through the real pipeline: Dovecot (the
founder's replies are appended to the Atlas inbox and polled), clamd, the scripted
classifier, aiosmtpd (the requests and alerts), and the real `claude` CLI against the
scripted Messages API for the launch an OK releases."""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
import uuid
from email import message_from_bytes, policy as email_policy
from email.message import EmailMessage
from email.utils import formatdate

import dkim
import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.conftest import CORPUS
from tests.services import stack
from tests.services.claude_api import ScriptedModel, bash, start_claude_api, text
from tests.services.smtp import start_smtp
from tests.services.stack import q
from tests.spawn.conftest import git

pytestmark = [pytest.mark.timeout(300), pytest.mark.integration,
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed")]

FOUNDER = "julien@atelier-moreau.fr"
ATLAS = "atlas@atelier-moreau.fr"
RUN_PLAN_ONLY = "[run_plan]\nenabled = true\n"
CONTRACT = json.dumps({"ok": True, "tenant": None, "routes_to_qa": [], "commits": [], "summary_md": "analyse faite",
                       "draft_reply_for_user": None})
WRITE_CONTRACT = f"printf '%s' '{CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\""
SIGNED = [b"from", b"to", b"subject", b"date", b"message-id", b"in-reply-to", b"references"]


@pytest.fixture(scope="module")
def dkim_key(tmp_path_factory):
    """A key published for the founder's domain (selector t1) and for another domain."""
    d = tmp_path_factory.mktemp("dkim")
    key = subprocess.run(["openssl", "genrsa", "1024"], capture_output=True, check=True).stdout
    pub = subprocess.run(["openssl", "rsa", "-pubout", "-outform", "DER"], input=key, capture_output=True,
                         check=True).stdout
    record = "v=DKIM1; k=rsa; p=" + base64.b64encode(pub).decode()
    keys = json.loads((CORPUS / "dkim-keys.json").read_text())
    keys |= {f"t1._domainkey.{dom}": record for dom in ("atelier-moreau.fr", "evil-promo.test")}
    (d / "keys.json").write_text(json.dumps(keys))
    return key, d / "keys.json"


@pytest.fixture
def steer(request, services, clamd, case_llm, dkim_key, tmp_path, monkeypatch):
    """Ingestion, classification, spawn and the approval stage on real workers; the policy
    is the test's (`@pytest.mark.policy(text)`), run + plan only by default; so is the agent
    (`@pytest.mark.agent(ScriptedModel)`), by default one that writes its contract."""
    marker = request.node.get_closest_marker("policy")
    agent = request.node.get_closest_marker("agent")
    policy = tmp_path / "policy.toml"
    policy.write_text(marker.args[0] if marker else RUN_PLAN_ONLY)
    repo = stack.site_repo(tmp_path / "repo")
    smtp = start_smtp()
    dv = services["dovecot"]
    api = start_claude_api(agent.args[0] if agent else ScriptedModel([[bash(WRITE_CONTRACT)], [text("Done.")]]))
    env = {**services["env"], **stack.mailbox_env(dv, tmp_path, smtp=smtp), "SYNEDRE_DKIM_KEYS_FILE": str(dkim_key[1]),
           "SYNEDRE_CLAMD": str(clamd.socket_path), "SYNEDRE_MISTRAL_API_KEY": "test-key-not-secret",
           "SYNEDRE_MISTRAL_SERVER_URL": case_llm.url, "SYNEDRE_APPROVAL_POLICY_FILE": str(policy),
           "SYNEDRE_CLAUDE_BIN": shutil.which("claude"), "SYNEDRE_ANTHROPIC_BASE_URL": api.url,
           "SYNEDRE_ANTHROPIC_API_KEY": "sk-ant-api03-TESTSECRET0123456789abcdef",
           "SYNEDRE_WORKSPACE_REPO": str(repo), "SYNEDRE_IDLE_TIMEOUT_S": "60", "SYNEDRE_LAUNCH_BUDGET_S": "120"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from tests.conftest import _reset_settings
    _reset_settings()
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", str(CORPUS / "directory.json")],
                   env=env, check=True, timeout=60, cwd=stack.ROOT, capture_output=True)
    logs, procs = services["logs"], []
    try:
        procs += stack.celery_workers(env, logs, ("poll", 2), ("scan,ocr", 2), ("classify,materialize", 8, "threads"),
                                      ("spawn", 1))
        yield {"url": services["db"], "dovecot": dv, "smtp": smtp, "api": api, "env": env, "key": dkim_key[0],
               "tmp": tmp_path, "repo": repo}
    finally:
        stack.stop_all(procs)
        api.stop()
        smtp.stop()


def status(url, mid) -> str:
    return q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid)[0][0]


def events(url, mid) -> list[tuple[str, dict]]:
    return q(url, "SELECT event, detail FROM synedre.audit_log WHERE message_id = %s ORDER BY id", mid)


def deliver(s, *raws: bytes) -> None:
    with s["dovecot"].client() as c:
        for raw in raws:
            c.append("INBOX", raw)
    from tasks.app import app
    app.send_task("synedre.poll", args=["atlas"])


def launchable(s, tag: str) -> int:
    """A run + plan message at `materialized` (classified earlier), handed to spawn."""
    mid = stack.message_at(s["url"], s["tmp"], f"steer-{tag}", "materialized", rationale="r")
    from tasks.app import app
    app.send_task("synedre.spawn", args=[mid])
    return mid


def request_mail(s, mid, count=1) -> EmailMessage:
    """The request mailed about `mid` (waiting until it is there)."""
    stack.wait_for(lambda: status(s["url"], mid) == "awaiting_approval", 90, "the launch to wait for approval",
                   interval=0.3)
    original = q(s["url"], "SELECT message_id FROM synedre.raw_messages WHERE id = %s", mid)[0][0]

    def found():
        rfc = q(s["url"], "SELECT rfc_message_id FROM synedre.outbound_mail WHERE message_id = %s"
                          " AND kind = 'approval' AND status = 'sent'", mid)
        return rfc and [m.message for m in s["smtp"].messages() if m.message["Message-ID"] == rfc[0][0]]
    mails = stack.wait_for(found, 60, "the approval request mail")
    assert len(mails) == count and "".join(mails[0]["In-Reply-To"].split()) == original  # threaded under it
    return mails[0]


def reply(s, to: EmailMessage, cover: str, *, sender: str = FOUNDER, signer: str | None = "atelier-moreau.fr",
          subject: str | None = None) -> bytes:
    """A reply (as a mail client writes it: the cover, then the quoted mail), DKIM-signed by `signer`."""
    msg = EmailMessage()
    msg["From"] = f"Julien Moreau <{sender}>"
    msg["To"] = ATLAS
    msg["Subject"] = subject or f"Re: {to['Subject']}"
    msg["Date"] = formatdate()
    msg["Message-ID"] = f"<reply-{uuid.uuid4().hex}@{sender.split('@')[1]}>"
    msg["In-Reply-To"] = to["Message-ID"]
    msg["References"] = f"{to['References'] or ''} {to['Message-ID']}".strip()
    quoted = "\n".join("> " + line for line in to.get_body(("plain",)).get_content().splitlines())
    msg.set_content(f"{cover}\n\nLe 2 déc. 2026 à 10:00, Atlas <{ATLAS}> a écrit :\n{quoted}\n")
    raw = msg.as_bytes(policy=email_policy.SMTP)
    if signer:
        raw = dkim.sign(raw, b"t1", signer.encode(), s["key"], include_headers=SIGNED) + raw
    return raw


def msgid(raw: bytes) -> str:
    return message_from_bytes(raw)["Message-ID"]


def reply_row(s, raw: bytes):
    """(id, status) of the reply once it has ended (noise or anything terminal)."""
    def ended():
        rows = q(s["url"], "SELECT s.message_id, s.status FROM synedre.email_states s JOIN synedre.raw_messages r"
                           " ON r.id = s.message_id WHERE r.message_id = %s", msgid(raw))
        return rows[0] if rows and rows[0][1] not in ("received", "scanning", "scanned", "reading", "read",
                                                      "classifying", "classified", "materializing") else None
    return stack.wait_for(ended, 90, f"the reply {msgid(raw)} to be processed", interval=0.3)


def ignored_because(s, reply_id) -> str | None:
    found = [d for e, d in events(s["url"], reply_id) if e == "approval_reply_ignored"]
    return found[0]["reason"] if found else None


def cli(s, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], env=s["env"], capture_output=True, text=True,
                          timeout=60, cwd=stack.ROOT)


def test_a_run_plan_request_waits_and_only_the_founder_s_signed_ok_releases_one_launch(steer):
    s, url = steer, steer["url"]
    p21 = (CORPUS / "cases" / "P21-founder-forward-run-plan.eml").read_bytes()
    deliver(s, p21)
    mid = stack.wait_for(lambda: q(url, "SELECT id FROM synedre.raw_messages WHERE message_id = %s",
                                   msgid(p21)), 30, "P21 ingested")[0][0]
    request = request_mail(s, mid)
    # to the founder only, threaded under his email, with the token in the subject and the body
    sent = [m for m in s["smtp"].messages() if m.message["X-Synedre-Kind"] == "approval"]
    assert [m.rcpt_tos for m in sent] == [(FOUNDER,)]
    token, rule = q(url, "SELECT token, rule FROM synedre.approvals WHERE message_id = %s", mid)[0]
    body = request.get_body(("plain",)).get_content()
    assert token in request["Subject"] and token in body and rule == "approval_rule_run_plan"
    assert "Gros sujet" in body and "run/plan" in body and "OK" in body and "NON" in body
    assert msgid(p21) in request["References"]
    listed = json.loads(cli(s, "approvals", "--json").stdout)
    assert [(r["message_id"], r["rule"]) for r in listed] == [(mid, "approval_rule_run_plan")]

    # none of these approves: each is audited with why, ends as noise, launches nothing
    unsigned = reply(s, request, "OK", signer=None)
    foreign = reply(s, request, "OK", signer="evil-promo.test")
    forward = reply(s, request, "OK", sender="contact@garage-martin.fr", signer=None,
                    subject=f"Fwd: {request['Subject']}")
    deliver(s, unsigned, foreign, forward)
    reasons = {}
    for name, raw in (("unsigned", unsigned), ("foreign", foreign), ("forward", forward)):
        rid, st = reply_row(s, raw)
        assert st == "noise", name
        reasons[name] = ignored_because(s, rid)
    assert reasons == {"unsigned": "not_dkim_verified", "foreign": "not_dkim_verified",
                       "forward": "not_from_the_founder"}
    assert status(url, mid) == "awaiting_approval"
    assert q(url, "SELECT count(*) FROM synedre.launches")[0][0] == 0

    # the founder's signed OK: exactly one launch, recorded with the reply's Message-ID
    ok = reply(s, request, "OK, allez-y.")
    deliver(s, ok)
    ok_id, st = reply_row(s, ok)
    assert st == "noise" and [e for e, _ in events(url, ok_id)].count("approval_reply_consumed") == 1
    stack.wait_for(lambda: q(url, "SELECT count(*) FROM synedre.launches WHERE status <> 'running'")[0][0], 120,
                   "the released launch to finish", interval=0.5)
    (approval_id, state, by, reply_id), = q(url, "SELECT id, status, decided_by, decision_message_id"
                                                 " FROM synedre.approvals WHERE message_id = %s", mid)
    assert (state, by, reply_id) == ("approved", FOUNDER, msgid(ok))
    assert q(url, "SELECT message_id, approval_id FROM synedre.launches") == [(mid, approval_id)]
    granted = [d for e, d in events(url, mid) if e == "approval_granted"]
    assert len(granted) == 1 and granted[0]["reply_message_id"] == msgid(ok)

    # the same reply again: the identical bytes are a duplicate, a copy re-sent is audited
    again = reply(s, request, "OK, allez-y.")
    deliver(s, ok, again)
    again_id, st = reply_row(s, again)
    assert st == "noise" and ignored_because(s, again_id) == "request_already_approved"
    stack.wait_for(lambda: "poll_duplicate" in [e for e, _ in events(url, ok_id)], 30, "the duplicate audited")
    assert q(url, "SELECT count(*) FROM synedre.launches")[0][0] == 1
    assert q(url, "SELECT count(*) FROM synedre.approvals WHERE status = 'approved'")[0][0] == 1


def test_ten_copies_of_the_genuine_reply_processed_at_once_approve_once(steer):
    s, url = steer, steer["url"]
    mid = launchable(s, "ten")
    request = request_mail(s, mid)
    copies = [reply(s, request, "OK") for _ in range(10)]
    deliver(s, *copies)
    rows = [reply_row(s, raw) for raw in copies]
    consumed = [rid for rid, _ in rows if "approval_reply_consumed" in [e for e, _ in events(url, rid)]]
    ignored = [ignored_because(s, rid) for rid, _ in rows if rid not in consumed]
    assert len(consumed) == 1 and ignored == ["request_already_approved"] * 9
    assert {st for _, st in rows} == {"noise"}
    stack.wait_for(lambda: q(url, "SELECT count(*) FROM synedre.launches")[0][0] >= 1, 60, "the launch")
    time.sleep(2)
    assert q(url, "SELECT count(*) FROM synedre.launches WHERE message_id = %s", mid)[0][0] == 1
    assert [e for e, _ in events(url, mid)].count("approval_granted") == 1


def test_non_quoting_an_ok_refuses_with_the_note_and_inspect_shows_it(steer):
    s, url = steer, steer["url"]
    mid = launchable(s, "non")
    request = request_mail(s, mid)
    assert "OK" in request.get_body(("plain",)).get_content()  # the quote holds an OK
    non = reply(s, request, "Non, attendez la réunion de jeudi.")
    deliver(s, non)
    reply_row(s, non)
    stack.wait_for(lambda: status(url, mid) == "refused", 30, "the message refused")
    assert q(url, "SELECT status, note FROM synedre.approvals WHERE message_id = %s", mid) == \
        [("refused", "attendez la réunion de jeudi.")]
    shown = cli(s, "inspect", str(mid))
    assert shown.returncode == 0 and "attendez la réunion de jeudi." in shown.stdout and "refused" in shown.stdout
    assert q(url, "SELECT count(*) FROM synedre.launches")[0][0] == 0


def test_an_unanswered_request_expires_with_one_alert_and_a_late_ok_changes_nothing(steer):
    from synedre import sweep
    s, url = steer, steer["url"]
    mid = launchable(s, "late")
    request = request_mail(s, mid)
    with psycopg.connect(url, autocommit=True) as conn:  # a day has passed
        conn.execute("UPDATE synedre.approvals SET expires_at = now() - interval '1 minute',"
                     " created_at = now() - interval '25 hours' WHERE message_id = %s", (mid,))
        conn.execute("UPDATE synedre.email_states SET status_at = now() - interval '25 hours'"
                     " WHERE message_id = %s", (mid,))
    late = reply(s, request, "OK")  # arrives after the expiry, before the sweep ran
    deliver(s, late)
    late_id, st = reply_row(s, late)
    assert st == "noise" and ignored_because(s, late_id) == "request_expired"
    assert (mid, "approval") in sweep.find_stuck()  # the sweep offers it at its expiry
    from tasks.app import app
    for _ in range(2):  # offered twice: one alert all the same
        app.send_task("synedre.approval", args=[mid])
    stack.wait_for(lambda: status(url, mid) == "refused", 60, "the expiry")
    time.sleep(3)
    alerts = [m for m in s["smtp"].messages() if m.message["X-Synedre-Kind"] == "approval-expired"]
    assert len(alerts) == 1 and alerts[0].rcpt_tos == (FOUNDER,)
    assert "expiré" in alerts[0].message.get_body(("plain",)).get_content()
    assert [e for e, _ in events(url, mid)].count("approval_expired") == 1
    assert q(url, "SELECT status FROM synedre.approvals WHERE message_id = %s", mid) == [("expired",)]
    assert q(url, "SELECT count(*) FROM synedre.launches")[0][0] == 0


def test_operator_approve_and_refuse_on_a_live_fleet_are_audited_with_the_os_user(steer):
    from synedre.cli.common import operator  # the real uid's name (tests/test_cli_operator.py: never LOGNAME)
    s, url = steer, steer["url"]
    yes, no = launchable(s, "op-yes"), launchable(s, "op-no")
    request_mail(s, yes), request_mail(s, no)
    listed = cli(s, "approvals")
    assert listed.returncode == 0 and str(yes) in listed.stdout and "approval_rule_run_plan" in listed.stdout
    refused = cli(s, "refuse", str(no), "--reason", "pas ce mois-ci")
    approved = cli(s, "approve", str(yes))
    assert approved.returncode == 0 and refused.returncode == 0, (approved.stderr, refused.stderr)
    by = f"operator:{operator()}"
    assert by in approved.stdout
    stack.wait_for(lambda: q(url, "SELECT count(*) FROM synedre.launches WHERE message_id = %s", yes)[0][0], 60,
                   "the approved launch")
    assert status(url, no) == "refused"
    assert [d["by"] for e, d in events(url, yes) if e == "approval_granted"] == [by]
    assert [(d["by"], d["note"]) for e, d in events(url, no) if e == "approval_refused"] == [(by, "pas ce mois-ci")]
    twice = cli(s, "approve", str(yes))  # consumed once: a second decision is refused, said
    assert twice.returncode == 1 and "request already approved" in twice.stderr
    assert cli(s, "approve", "999999").returncode == 1


def recapped(s, tag: str, summary: str, repo=None, **state) -> tuple[int, EmailMessage]:
    """A message whose work was done (its launch on its branch of `repo`, the fixture's by
    default) and recapped to the founder; `state`: more of its email_states (stack.message_at)."""
    from synedre import db
    from synedre.mail import outbound
    mid = stack.message_at(s["url"], s["tmp"], f"recap-{tag}", "actioned", "leger", **state)
    branch = f"synedre/msg-{mid}-a1"
    git(repo or s["repo"], "branch", branch, "preprod")
    contract = {"ok": True, "tenant": None, "routes_to_qa": [], "commits": ["abc1234"], "summary_md": summary,
                "draft_reply_for_user": None}
    with psycopg.connect(s["url"], autocommit=True) as conn:
        conn.execute("INSERT INTO synedre.audit_log (message_id, event, detail) VALUES (%s, 'classified', '{}')",
                     (mid,))
        conn.execute("INSERT INTO synedre.launches (message_id, attempt, status, contract, branch)"
                     " VALUES (%s, 1, 'succeeded', %s, %s)", (mid, Jsonb(contract), branch))
    before = len(s["smtp"].messages())
    outbound.send_to_founder(db.transaction, "atlas", mid, "recap", subject="Recap",
                             text=f"Ce que l'agent a fait :\n{summary}")
    return mid, s["smtp"].wait_for(before + 1)[-1].message


@pytest.mark.policy("")
def test_recap_verdicts_count_in_calibration_and_a_new_instruction_continues_the_branch(steer):
    from synedre.report.calibration import collect
    s, url = steer, steer["url"]
    good, good_recap = recapped(s, "good", "Le formulaire de contact est réparé.")
    bad, bad_recap = recapped(s, "bad", "La page tarifs est refaite.")
    ok, non = reply(s, good_recap, "OK merci"), reply(s, bad_recap, "NON : le bouton payer manque")
    deliver(s, ok, non)
    reply_row(s, ok), reply_row(s, non)
    assert q(url, "SELECT message_id, verdict, note FROM synedre.recap_verdicts ORDER BY message_id") == \
        [(good, "accepted", "merci"), (bad, "rejected", "le bouton payer manque")]
    with psycopg.connect(url) as conn:
        run = {i.intent: i for i in collect(conn, days=1).intents}["run"]
    # both linked runs are open: the proxy alone would have said two successes
    assert (run.count, run.successes) == (2, 1)
    shown = cli(s, "inspect", str(bad))
    assert "recap verdict: rejected" in shown.stdout and "le bouton payer manque" in shown.stdout

    # any other reply to a recap is a new request in its thread, processed like any email
    more = reply(s, good_recap, "Pouvez-vous aussi ajouter un champ téléphone ? SYN-CASE-P21")
    deliver(s, more)
    new_id = stack.wait_for(lambda: q(url, "SELECT s.message_id FROM synedre.email_states s JOIN"
                                           " synedre.raw_messages r ON r.id = s.message_id WHERE r.message_id = %s",
                                      msgid(more)), 30, "the new request ingested")[0][0]
    stack.wait_for(lambda: q(url, "SELECT count(*) FROM synedre.launches WHERE message_id = %s AND status <> 'running'",
                             new_id)[0][0], 150, "its launch", interval=0.5)
    assert q(url, "SELECT follows_message_id, intent FROM synedre.email_states WHERE message_id = %s", new_id) == \
        [(good, "run")]
    assert q(url, "SELECT branch FROM synedre.launches WHERE message_id = %s", new_id) == \
        [(f"synedre/msg-{good}-a1",)]
    first = [r for r in s["api"].main_requests() if r.step == 0][-1]
    prompt = json.dumps(first.body["messages"][0], ensure_ascii=False)
    assert "<<<PREVIOUS_RECAP " in prompt and "Le formulaire de contact est réparé." in prompt
    assert "<<<END PREVIOUS_RECAP " in prompt and "abc1234" in prompt
