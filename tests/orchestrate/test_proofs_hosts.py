"""Proofs every host can read (issue 16, item 7; acceptance 8): two "hosts" on one machine.

The QA worker group and the recap worker group run with state directories of their own, and
the mock-up is registered through the CLI run with a third one, deleted at once: nothing
reaches a host through a shared disk. Between QA and the recap, the QA host's state
directory is deleted too (the QA worker stopped first, the recap worker started after), so
the recap can only find its proofs in PostgreSQL. Everything else is the real loop of
test_close_the_loop: the `claude` CLI against the scripted API, `./deploy`, Chromium, aiosmtpd.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from PIL import Image
from psycopg.types.json import Jsonb

from tests.conftest import CORPUS
from tests.orchestrate.test_close_the_loop import FIXED, contract_step, q, status, write_page
from tests.services import stack
from tests.services.claude_api import ScriptedModel, start_claude_api, text
from tests.services.site import start_site
from tests.services.smtp import start_smtp
from tests.spawn.test_launch_e2e import SECRETS, make_launchable

pytestmark = [pytest.mark.timeout(180), pytest.mark.integration,
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed"),
              pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is missing")]

ROUTES = ("/contact", "/about")


@pytest.fixture
def hosts(services, tmp_path):
    """acme's pre-production site, SMTP to aiosmtpd, the environment every host shares (the
    database, Redis, the mailbox) and one state directory per host."""
    site, smtp = start_site(tmp_path / "site"), start_smtp()
    # every page passes its mock-up (the threshold is all of it): the comparison runs and
    # draws its diff, and one launch is enough
    env = {**services["env"], **stack.mailbox_env(services["dovecot"], tmp_path, smtp=smtp),
           "SYNEDRE_WORKSPACE_REPO": str(site.repo), "SYNEDRE_WORKSPACE_BASE_BRANCH": "main",
           "SYNEDRE_CLAUDE_BIN": shutil.which("claude"),
           "SYNEDRE_ANTHROPIC_API_KEY": SECRETS[1], "SYNEDRE_IDLE_TIMEOUT_S": "60",
           "SYNEDRE_LAUNCH_BUDGET_S": "120", "SYNEDRE_QA_TIMEOUT_S": "20", "SYNEDRE_ISO_THRESHOLD": "1.0"}
    state = {h: tmp_path / f"{h}-host" for h in ("spawn", "qa", "recap", "cli")}
    cli = {**env, "SYNEDRE_STATE_DIR": str(state["cli"])}
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", str(CORPUS / "directory.json")],
                   env=cli, check=True, timeout=60, cwd=stack.ROOT, capture_output=True)
    with psycopg.connect(services["db"], autocommit=True) as c:
        cid = c.execute("INSERT INTO synedre.clients (codename, name, deploy_target) VALUES ('acme', 'Acme', 'acme')"
                        " RETURNING id").fetchone()[0]
        c.execute("INSERT INTO synedre.tenant_topology (client_id, deploy_target, config) VALUES (%s, 'acme', %s)",
                  (cid, Jsonb(site.topology())))
        c.execute("INSERT INTO synedre.chantiers (codename, client_id, title) VALUES ('refonte', %s, 'Refonte')",
                  (cid,))
    procs: list = []

    def worker(host: str, queues: str, **kw):
        procs.append(stack.celery_worker({**env, "SYNEDRE_STATE_DIR": str(state[host])}, services["logs"],
                                         queues=queues, **kw))
        return procs[-1]
    yield {"url": services["db"], "env": env, "cli": cli, "state": state, "smtp": smtp, "worker": worker,
           "procs": procs, "tmp": tmp_path}
    stack.stop_all(procs)
    smtp.stop()
    site.stop()


def test_the_recap_host_mails_every_proof_qa_took_on_another_host_against_a_mockup_from_a_third(hosts):
    url, state, tmp = hosts["url"], hosts["state"], hosts["tmp"]
    mid, = make_launchable(url, tmp, complexity="plan", tag="hosts")
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("UPDATE synedre.email_states SET chantier_id = (SELECT id FROM synedre.chantiers"
                  " WHERE codename = 'refonte') WHERE message_id = %s", (mid,))
    # the mock-up, registered through the CLI of a third host, whose state dir then vanishes
    image = tmp / "contact-mockup.png"
    Image.new("RGB", (1280, 720), "#c00").save(image)
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "mockup", "refonte", "/contact", str(image)],
                   env=hosts["cli"], check=True, timeout=60, cwd=stack.ROOT, capture_output=True)
    (registered, mockup_key), = q(url, "SELECT path, proof FROM synedre.mockups")
    assert Path(registered).is_relative_to(state["cli"].resolve())
    shutil.rmtree(state["cli"])

    api = start_claude_api(ScriptedModel([[write_page(FIXED, "contact: fix the form")],
                                          [contract_step(routes=ROUTES)], [text("Done.")]]))
    hosts["procs"].append(api)
    hosts["env"]["SYNEDRE_ANTHROPIC_BASE_URL"] = api.url
    hosts["worker"]("spawn", "spawn,deploy", concurrency=1)
    qa_worker = hosts["worker"]("qa", "qa", concurrency=2)
    from tasks.app import app
    app.send_task("synedre.spawn", args=[mid])
    stack.wait_for(lambda: status(url, mid) in ("qa_passed", "qa_failed", "spawn_failed", "orchestration_failed"),
                   120, "QA to end", interval=0.5)
    checks = q(url, "SELECT c.declared, c.status, c.screenshot, c.diff_image, c.screenshot_proof, c.diff_proof,"
                    " c.detail FROM synedre.qa_checks c ORDER BY c.declared")
    assert status(url, mid) == "qa_passed", checks
    # what the QA host produced, in its own state dir, and the mock-up it compared with
    produced = {}
    for route, _, shot, diff, shot_key, diff_key, _ in checks:
        assert Path(shot).is_relative_to(state["qa"].resolve()) and shot_key and bool(diff) == bool(diff_key)
        produced[f"{route} screenshot"] = Path(shot).read_bytes()
        if diff:
            produced[f"{route} diff"] = Path(diff).read_bytes()
    assert set(produced) == {"/about screenshot", "/contact screenshot", "/contact diff"}
    contact = next(c for c in checks if c[0] == "/contact")
    assert contact[6]["iso"]["mismatch_ratio"] > 0.5  # a white page against a red mock-up: it was compared
    cached_mockup, = (state["qa"] / "proofs" / mockup_key).iterdir()
    assert cached_mockup.read_bytes() == image.read_bytes()

    # the QA host goes away with its disk; the recap host starts with an empty state dir
    qa_worker.stop()
    shutil.rmtree(state["qa"])
    hosts["worker"]("recap", "recap", concurrency=1)
    stack.wait_for(lambda: status(url, mid) == "actioned", 60, "the recap", interval=0.5)
    mail, = hosts["smtp"].wait_for(1, timeout=30)
    # every image part, attached or inline: each one QA took, byte for byte
    images = {p.get_payload(decode=True) for p in mail.message.walk() if p.get_content_maintype() == "image"}
    assert images == set(produced.values())
    (detail,), = q(url, "SELECT detail FROM synedre.audit_log WHERE message_id = %s AND event = 'recap_sent'", mid)
    # the three images, and the launch's patch (the recap shows what changed: issue 28)
    patches = [p.get_filename() for p in mail.message.walk() if (p.get_filename() or "").endswith(".patch")]
    assert detail["skipped"] == [] and detail["attachments"] == 4 and len(patches) == 1
    cached = {p.read_bytes() for p in (state["recap"] / "proofs").rglob("*.png")}
    assert cached == set(produced.values())
