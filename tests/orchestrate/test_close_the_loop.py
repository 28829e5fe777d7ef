"""After the launch, end to end on real services: the real `claude` CLI against the scripted
Messages API, a real git repository with a `deploy` script publishing a site over HTTP,
Chromium through Playwright, Dovecot's Drafts folder and an aiosmtpd server."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.conftest import CORPUS
from tests.services import stack
from tests.services.claude_api import PerLaunch, ScriptedModel, bash, start_claude_api, text
from tests.services.site import page, start_site
from tests.services.smtp import start_smtp
from tests.services.stack import q
from tests.spawn.test_launch_e2e import SECRETS, make_launchable

pytestmark = [pytest.mark.timeout(300), pytest.mark.integration,
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed"),
              pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is missing")]

BROKEN = page("Contact", "<form><label>Email <input name='email'></label></form>"
                         "<script>throw new Error('contact form broken')</script>")
FIXED = page("Contact", "<form><label>Email <input name='email'></label><button>Envoyer</button></form>")
DRAFT = "Bonjour Madame, la page contact est corrigée. Bien à vous, Julien"


def write_page(content: str, message: str) -> dict:
    """A bash step: the agent edits site/contact.html and commits it."""
    return bash(f"cat > site/contact.html <<'EOF'\n{content}EOF\ngit add site/contact.html && "
                f"git commit -qm '{message}'")


def contract_step(routes=("/contact",), tenant="acme", draft=DRAFT, commits=True) -> dict:
    body = {"ok": True, "tenant": tenant, "routes_to_qa": list(routes), "commits": ["__SHA__"] if commits else [],
            "summary_md": "La page contact est corrigée.", "draft_reply_for_user": draft}
    js = json.dumps(body).replace('"__SHA__"', '"\'"$(git rev-parse --short HEAD)"\'"')
    return bash(f"printf '%s' '{js}' > \"$SYNEDRE_CONTRACT_PATH\"")


@pytest.fixture
def loop(services, tmp_path, monkeypatch):
    """A client `acme` whose pre-production is a local site, SMTP to aiosmtpd, and the
    workers of every stage after materialization."""
    site = start_site(tmp_path / "site")
    smtp = start_smtp()
    env = dict(services["env"])
    box = tmp_path / "mailboxes.toml"
    dv = services["dovecot"]
    box.write_text(f'[mailboxes.atlas]\nimap_host = "{dv.host}"\nimap_port = {dv.port}\nimap_tls = false\n'
                   f'smtp_host = "{smtp.host}"\nsmtp_port = {smtp.port}\nsmtp_tls = false\n'
                   f'username = "{dv.username}"\npassword_env = "TEST_ATLAS_PASSWORD"\nfolder = "INBOX"\n')
    env.update(SYNEDRE_MAILBOXES_FILE=str(box), SYNEDRE_WORKSPACE_REPO=str(site.repo),
               SYNEDRE_WORKSPACE_BASE_BRANCH="main", SYNEDRE_CLAUDE_BIN=shutil.which("claude"),
               SYNEDRE_ANTHROPIC_API_KEY=SECRETS[1],
               SYNEDRE_IDLE_TIMEOUT_S="60", SYNEDRE_LAUNCH_BUDGET_S="120", SYNEDRE_QA_TIMEOUT_S="20")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", str(CORPUS / "directory.json")],
                   env=env, check=True, timeout=60, cwd=stack.ROOT, capture_output=True)
    url = services["db"]
    with psycopg.connect(url, autocommit=True) as c:
        cid = c.execute("INSERT INTO synedre.clients (codename, name, deploy_target) VALUES ('acme', 'Acme', 'acme')"
                        " RETURNING id").fetchone()[0]
        c.execute("INSERT INTO synedre.tenant_topology (client_id, deploy_target, config) VALUES (%s, 'acme', %s)",
                  (cid, Jsonb(site.topology())))
    procs = []

    def start(model):
        api = start_claude_api(model)
        full = {**env, "SYNEDRE_ANTHROPIC_BASE_URL": api.url}
        procs.append(api)
        procs.extend(stack.celery_workers(full, services["logs"], ("spawn", 1), ("deploy,recap", 2), ("qa", 2)))
        return api
    yield {"url": url, "site": site, "smtp": smtp, "start": start, "env": env, "tmp": tmp_path}
    stack.stop_all(procs)
    smtp.stop()
    site.stop()


def status(url, mid):
    return q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", mid)[0][0]


def test_a_broken_page_is_caught_iterated_fixed_and_one_recap_reaches_the_founder(loop):
    url = loop["url"]
    mid, = make_launchable(url, loop["tmp"], complexity="plan", tag="loop")
    first = ScriptedModel([[write_page(BROKEN, "contact: new form")], [contract_step()], [text("Done.")]])
    fix = ScriptedModel([[write_page(FIXED, "contact: fix the script error")], [contract_step()], [text("Fixed.")]])
    api = loop["start"](PerLaunch(lambda request: fix if "PREVIOUS_RUN" in request else first))
    from tasks.app import app
    app.send_task("synedre.spawn", args=[mid])
    stack.wait_for(lambda: status(url, mid) in ("actioned", "escalated", "orchestration_failed", "spawn_failed"),
                   240, "the loop to end", interval=0.5)
    trail = q(url, "SELECT event, detail FROM synedre.audit_log WHERE message_id = %s ORDER BY id", mid)
    events = [e for e, _ in trail]
    assert status(url, mid) == "actioned", (
        trail, q(url, "SELECT c.declared, c.status, c.reasons, c.detail FROM synedre.qa_checks c ORDER BY id"),
        q(url, "SELECT attempt, status, stop_reason, salvage FROM synedre.launches ORDER BY id"))
    # QA caught the page error in Chromium on the first run, and passed on the second
    checks = q(url, "SELECT r.iteration, c.declared, c.status, c.detail FROM synedre.qa_checks c"
                    " JOIN synedre.qa_runs r ON r.id = c.qa_run_id ORDER BY c.id")
    assert [(i, route, s) for i, route, s, _ in checks] == [(1, "/contact", "failed"), (2, "/contact", "passed")]
    assert any("contact form broken" in e for e in checks[0][3]["page_errors"])
    # the iteration prompt carried that error and the previous run, compacted
    firsts = [r for r in api.main_requests() if r.step == 0]
    assert len(firsts) == 2
    iteration_prompt = json.dumps(firsts[1].body["messages"][0], ensure_ascii=False)
    assert "contact form broken" in iteration_prompt and "PREVIOUS_RUN" in iteration_prompt
    assert "Your previous run, compacted" in iteration_prompt and "contact: new form" in iteration_prompt
    # exactly one recap, to the founder only, threaded, with the /contact screenshot
    founder = json.loads((CORPUS / "directory.json").read_text())["founder"]["emails"][0]
    mails = loop["smtp"].wait_for(1, timeout=30)
    assert len(loop["smtp"].messages()) == 1
    m = mails[0]
    assert m.rcpt_tos == (founder,)
    msg = m.message
    original = q(url, "SELECT message_id FROM synedre.raw_messages WHERE id = %s", mid)[0][0]
    assert msg["In-Reply-To"].strip() == original and original in msg["References"]
    assert msg["Subject"].startswith("[Atlas] ")
    shots = [p for p in msg.walk() if p.get_content_type() == "image/png"]  # inline, beside the HTML
    assert shots and shots[-1].get_content()[:8] == b"\x89PNG\r\n\x1a\n"
    body = msg.get_body(("plain",)).get_content()
    assert "/contact : OK" in body and DRAFT in body
    assert events.count("spawn_started") == 2 and "deployed" in events and "recap_sent" in events
