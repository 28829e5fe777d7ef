"""An agent that prints every kind of planted secret, through the real CLI under a pty and a
real spawn worker, leaves none of them in the database, the NDJSON file or the worker's log."""
import base64
import json
import shutil
from pathlib import Path

import psycopg
import pytest

from tests.orchestrate.test_close_the_loop import loop, q  # noqa: F401  loop is a fixture used here
from tests.services import stack
from tests.services.claude_api import ScriptedModel, bash, text
from tests.spawn.test_launch_e2e import agent_script, finished, launch_env, make_launchable, repo  # noqa: F401
from tests.spawn.test_redact import SHAPES

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed")]


def dump_schema(url: str) -> str:
    """Every row of every table of the schema, as text."""
    with psycopg.connect(url) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'synedre'"
            " AND table_type = 'BASE TABLE'")]
        return "\n".join(json.dumps(r, default=str) for t in tables
                         for (r,) in conn.execute(f"SELECT row_to_json(x) FROM synedre.{t} x"))


def test_every_planted_secret_kind_stays_out_of_the_database_the_ndjson_and_the_log(services, launch_env,  # noqa: F811
                                                                                   tmp_path):
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    planted = "\n".join(t for _, t, _, _ in SHAPES)
    blob = base64.b64encode(planted.encode()).decode()
    prose = next(secret for sid, _, secret, _ in SHAPES if sid == "flag_password")
    api, env = launch_env(agent_script([
        [bash(f"echo {blob} | base64 -d")],  # the tool result carries every secret in clear
        [text(f"Found them. The password is {prose}, I will not use it.")],  # and the model repeats one
    ]))
    worker = stack.spawn_one(env, services["logs"], mid, lambda: finished(url, 1), 180, "the launch to finish",
                             concurrency=1)
    sent_back = json.dumps([r.body for r in api.main_requests()])
    dump = dump_schema(url)
    ndjson = "".join(p.read_text() for p in (tmp_path / "state").rglob("events.ndjson"))
    log = worker.output()
    assert ndjson and "[REDACTED" in dump
    leaked = []
    for sid, _, secret, _ in SHAPES:
        assert secret in sent_back, f"{sid}: the agent did not really print it"
        for where, content in (("database", dump), ("ndjson", ndjson), ("log", log)):
            if secret in content:
                leaked.append(f"{sid} in {where}")
    assert leaked == []


def test_secrets_in_what_the_agent_leaves_its_contract_its_commits_and_a_failed_run_s_salvage_are_not_stored(
        services, launch_env, tmp_path):  # noqa: F811
    """The stream is not all an agent writes: its contract (kept on the launch, read by the
    deploy and the recap), its commit subjects and, when the run fails, the raw contract text
    and the validation errors quoting it (the salvage). Each goes through the redactor."""
    from tests.spawn.test_launch_e2e import launch_one

    url = services["db"]
    picked = [s for s in SHAPES if s[0] in ("flag_password", "flag_password_equals")] + SHAPES[:3]
    planted = " ; ".join(t for _, t, _, _ in picked)

    def b64(value: str) -> str:
        return base64.b64encode(value.encode()).decode()

    def script(contract: dict, tag: str) -> ScriptedModel:
        return ScriptedModel([
            [bash(f"echo {b64(json.dumps(contract))} | base64 -d > \"$SYNEDRE_CONTRACT_PATH\"")],
            [bash(f"f=fix-{tag}.txt && pwd > $f && git add $f"
                  f" && git commit -qm \"$(echo {b64(planted)} | base64 -d)\"")],
            [text("done")]])
    valid = {"ok": True, "tenant": "dupont", "routes_to_qa": ["/"], "commits": [], "summary_md": planted,
             "draft_reply_for_user": planted}
    _, (status, _, _, _, _, ok_id), _ = launch_one(services, launch_env, tmp_path, script(valid, "ok"), tag="ok")
    assert status == "succeeded"
    invalid = {"ok": planted, "tenant": "dupont", "commits": [], "summary_md": planted}  # refused, kept as salvage
    _, (status, reason, _, salvage, _, bad_id), _ = launch_one(services, launch_env, tmp_path,
                                                               script(invalid, "bad"), tag="bad")
    assert (status, reason) == ("failed", "invalid_contract")
    assert salvage["commits"] and salvage["contract"] and salvage["contract_errors"]  # there, but hidden
    with psycopg.connect(url) as conn:
        (contract,), = conn.execute("SELECT contract FROM synedre.launches WHERE id = %s", (ok_id,)).fetchall()
    assert contract["tenant"] == "dupont" and "[REDACTED" in contract["summary_md"]
    dump = dump_schema(url)
    leaked = [sid for sid, _, secret, _ in picked if secret in dump]
    assert leaked == [] and "[REDACTED" in json.dumps(salvage)


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is missing")
def test_secrets_in_the_deploy_log_and_the_pages_console_are_not_stored(loop, capfd, monkeypatch):  # noqa: F811
    """After the launch, what the client's code prints reaches us too: its `./deploy`'s output
    (kept in `qa_runs`) and the page's console in Chromium (kept in `qa_checks`). The agent
    makes both print planted secrets; the stages run in this process, so its log is read too."""
    from synedre.config import get_settings
    from synedre.stages import deploy, qa, spawn
    from tests.orchestrate.test_close_the_loop import contract_step, page
    from tests.services.claude_api import start_claude_api

    url, site = loop["url"], loop["site"]
    picked = [s for s in SHAPES if s[0] in ("flag_password", "flag_password_equals")]
    script = (site.repo / "deploy").read_text().replace(
        "set -euo pipefail\n", "set -euo pipefail\n" + "".join(f"echo {json.dumps(t)}\n" for _, t, _, _ in picked), 1)
    broken = page("Contact", "<form><button>Envoyer</button></form>"
                  + "".join(f"<script>console.error({json.dumps(t)})</script>" for _, t, _, _ in picked))

    def b64(value: str) -> str:
        return base64.b64encode(value.encode()).decode()
    mid, = make_launchable(url, loop["tmp"], complexity="plan", tag="planted-after")
    api = start_claude_api(ScriptedModel([
        [bash(f"echo {b64(script)} | base64 -d > deploy && echo {b64(broken)} | base64 -d > site/contact.html"
              " && git add deploy site/contact.html && git commit -qm 'contact, and a chatty deploy'")],
        [contract_step()], [text("Done.")]]))
    try:
        monkeypatch.setenv("SYNEDRE_ANTHROPIC_BASE_URL", api.url)
        get_settings.cache_clear()
        assert spawn.run(mid).status == "spawned"
    finally:
        api.stop()
    assert deploy.run(mid).status == "deployed"
    assert qa.plan(mid)[0].status == "qa"
    assert qa.check_one(mid).status == "qa_failed"  # the console errors failed the page
    (log_tail,), = [r for r in q(url, "SELECT deploy_log FROM synedre.qa_runs")]
    (detail,), = [r for r in q(url, "SELECT detail FROM synedre.qa_checks")]
    assert "[REDACTED" in log_tail and detail["console_errors"] and "[REDACTED" in json.dumps(detail)
    dump, printed = dump_schema(url), capfd.readouterr()
    ndjson = "".join(p.read_text() for p in Path(get_settings().state_dir).rglob("events.ndjson"))
    leaked = [f"{sid} in {where}" for sid, _, secret, _ in picked
              for where, content in (("database", dump), ("ndjson", ndjson), ("log", printed.out + printed.err))
              if secret in content]
    assert leaked == []
