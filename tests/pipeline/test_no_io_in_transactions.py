"""No stage holds a database connection, let alone a transaction, across its slow call.

Every stage runs here in this process, one after the other, on a pool of ONE connection,
against the real services (clamd, Tesseract, the real `claude` CLI and the scripted
Messages API, the client's `./deploy`, Chromium, Dovecot and aiosmtpd). Each slow call —
clamd, Tesseract, the LLM, the embedding, the agent, the deploy, the sitemap, the browser,
the mail — is wrapped by a probe that, before calling the real thing, checks that the
pool's one connection is back in the pool and that no transaction of this database is
open: a stage that called out with its claim's transaction open (or a connection checked
out) fails here, whichever stage it is (issue 18, item 3)."""
from __future__ import annotations

import functools
import shutil
from pathlib import Path

import psycopg
import pytest

from synedre import db
from synedre.config import Settings, get_settings
from synedre.pipeline import Status
from synedre.runner import Done
from tests.conftest import CORPUS, rebuild_pool
from tests.orchestrate.test_close_the_loop import FIXED, contract_step, loop, q, status, write_page  # noqa: F401
from tests.services.claude_api import ScriptedModel, start_claude_api, text
from tests.spawn.test_launch_e2e import make_launchable

pytestmark = [pytest.mark.timeout(300), pytest.mark.integration,
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed"),
              pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is missing")]


@pytest.fixture
def one_connection(loop, clamd, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SYNEDRE_CLAMD", str(clamd.socket_path))
    close = rebuild_pool(monkeypatch, 1)
    yield loop
    close()
    get_settings.cache_clear()


def probed(monkeypatch, url: str, calls: list[str], owner, name: str) -> None:
    """Wrap `owner.name` (the module attribute the stage calls) with the probe."""
    real = getattr(owner, name)

    @functools.wraps(real)
    def probe(*args, **kwargs):
        stats = db.pool().get_stats()
        with psycopg.connect(url, autocommit=True) as c:
            open_tx = c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND xact_start IS NOT NULL AND pid <> pg_backend_pid()"
                                " AND backend_type = 'client backend'").fetchone()[0]
        calls.append(f"{name}: available={stats.get('pool_available')}/{stats.get('pool_size')} open_tx={open_tx}")
        assert stats.get("pool_available") == stats.get("pool_size") and open_tx == 0, calls[-1]
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, probe)


def test_every_stage_calls_out_with_no_connection_held_and_no_transaction_open(one_connection, monkeypatch):
    from synedre import ai
    from synedre.mail import outbound
    from synedre.orchestrate import qa as browser
    from synedre.spawn import launcher
    from synedre.stages import classify, deploy, ocr, poll, qa, recap, scan, spawn

    setup, url, calls = one_connection, one_connection["url"], []
    for owner, name in ((scan, "scan_bytes"), (ocr, "ocr_image"), (ai, "complete"), (ai, "embed"),
                        (launcher, "run"), (deploy, "run_deploy"), (browser, "fetch_sitemap"),
                        (browser, "check_route"), (outbound, "send_to_founder")):
        probed(monkeypatch, url, calls, owner, name)
    # scan, OCR and classification: a founder's screenshot (an image OCR reads); no LLM is
    # configured, so the classifier's call finds no provider and the message ends classify_failed
    raw = (CORPUS / "cases" / "P07-founder-screenshot-false-noise.eml").read_bytes()
    mid = poll.ingest_one(raw, "atlas", 1, 1, Settings(), lambda _: None)
    assert isinstance(scan.run(mid), Done) and status(url, mid) == "scanned"
    assert isinstance(ocr.run(mid), Done) and status(url, mid) == "read"
    assert isinstance(classify.run(mid), Done) and status(url, mid) == "classify_failed"
    # the launch, the deploy, the QA plan and its route, the recap
    launched, = make_launchable(url, setup["tmp"], complexity="plan", tag="noio")
    api = start_claude_api(ScriptedModel([[write_page(FIXED, "contact: fix")], [contract_step()], [text("Done.")]]))
    try:
        monkeypatch.setenv("SYNEDRE_ANTHROPIC_BASE_URL", api.url)
        get_settings.cache_clear()
        assert spawn.run(launched).status == Status.SPAWNED, q(url, "SELECT stop_reason, salvage FROM synedre.launches")
    finally:
        api.stop()
    assert deploy.run(launched).status == Status.DEPLOYED
    result, pending = qa.plan(launched)
    assert result.status == Status.QA and pending == 1
    assert qa.check_one(launched).status == Status.QA_PASSED
    assert recap.run(launched).status == Status.ACTIONED
    assert len(setup["smtp"].messages()) == 1
    probed_names = {c.split(":")[0] for c in calls}
    assert probed_names == {"scan_bytes", "ocr_image", "complete", "embed", "run", "run_deploy", "fetch_sitemap",
                            "check_route", "send_to_founder"}, calls
