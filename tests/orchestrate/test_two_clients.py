"""Two clients, each with its own repository and its own pre-production site, configured only
through `synedre directory import` (issue 16, acceptance 2): one repository a local path, the
other a bare repository reached through `file://`. Two run + plan requests go through the real
fleet at once (the real `claude` CLI against the scripted API, deploy, Chromium QA, the recap);
the deploy worker has a state directory of its own, so it reads nothing the spawn worker wrote."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import psycopg
import pytest

from tests.conftest import CORPUS
from tests.orchestrate.test_close_the_loop import contract_step, write_page
from tests.services import stack
from tests.services.claude_api import PerLaunch, ScriptedModel, assistant_turns, start_claude_api, text
from tests.services.site import page, start_site
from tests.services.smtp import start_smtp
from tests.services.stack import git, q
from tests.spawn.test_launch_e2e import SECRETS, make_launchable

pytestmark = [pytest.mark.timeout(240), pytest.mark.integration,
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed"),
              pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is missing")]

CLIENTS = {"alpha-co": "alpha", "beta-co": "beta"}  # codename -> deploy target


class Together(PerLaunch):
    """Each client's own script; the first answer of each launch waits until both launches
    have asked, so the two agents really run at the same time."""

    def __init__(self, scripts: dict[str, ScriptedModel], timeout_s: float = 90.0):
        super().__init__(self._pick)
        self.scripts, self.timeout_s = scripts, timeout_s
        self.seen: set[str] = set()
        self.both = threading.Event()
        self.lock = threading.Lock()

    def _pick(self, first_message: str) -> ScriptedModel:
        mine = [c for c in self.scripts if f"{c} (" in first_message]
        assert len(mine) == 1, first_message[:2000]
        return self.scripts[mine[0]]

    def for_request(self, body):
        model = super().for_request(body)
        if assistant_turns(body) == 0:
            with self.lock:
                self.seen.add(next(c for c, m in self.scripts.items() if m is model))
                if len(self.seen) == len(self.scripts):
                    self.both.set()
            self.both.wait(self.timeout_s)
        return model


def agent(client: str) -> ScriptedModel:
    """The agent edits its client's contact page, commits, and names its client's tenant."""
    marker = f"Formulaire de {client}"
    body = f"<form><label>Email <input name='email'></label><button>{marker}</button></form>"
    return ScriptedModel([[write_page(page("Contact", body), f"{client}: contact form")],
                          [contract_step(tenant=client, draft=f"Bonjour, la page contact de {client} est faite.")],
                          [text("Done.")]])


@pytest.fixture
def two(services, tmp_path, monkeypatch):
    """alpha-co: a local working tree; beta-co: a bare repository through file:// (its site's
    repository cloned bare, the original then left alone). Both through the directory file."""
    alpha = start_site(tmp_path / "alpha", target="alpha")
    beta = start_site(tmp_path / "beta", target="beta")
    remote = tmp_path / "beta" / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(beta.repo), str(remote)], check=True, timeout=30)
    mono = tmp_path / "mono"  # the fleet's default repository: neither client's launch may touch it
    subprocess.run(["git", "init", "-q", "-b", "main", str(mono)], check=True, timeout=30)
    git(mono, "commit", "-q", "--allow-empty", "-m", "monorepo")
    smtp = start_smtp()
    box = tmp_path / "mailboxes.toml"
    dv = services["dovecot"]
    box.write_text(f'[mailboxes.atlas]\nimap_host = "{dv.host}"\nimap_port = {dv.port}\nimap_tls = false\n'
                   f'smtp_host = "{smtp.host}"\nsmtp_port = {smtp.port}\nsmtp_tls = false\n'
                   f'username = "{dv.username}"\npassword_env = "TEST_ATLAS_PASSWORD"\nfolder = "INBOX"\n')
    env = {**services["env"], "SYNEDRE_MAILBOXES_FILE": str(box), "SYNEDRE_WORKSPACE_REPO": str(mono),
           "SYNEDRE_WORKSPACE_BASE_BRANCH": "main", "SYNEDRE_CLAUDE_BIN": shutil.which("claude"),
           "SYNEDRE_ANTHROPIC_API_KEY": SECRETS[1], "SYNEDRE_IDLE_TIMEOUT_S": "60",
           "SYNEDRE_LAUNCH_BUDGET_S": "120", "SYNEDRE_QA_TIMEOUT_S": "20"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    directory = json.loads((CORPUS / "directory.json").read_text())
    directory["clients"] += [
        {"codename": "alpha-co", "name": "Alpha", "deploy_target": "alpha", "preprod_url": alpha.url,
         "deploy_hosts": [alpha.host], "repo": str(alpha.repo), "persons": [{"email": "contact@alpha.example"}]},
        {"codename": "beta-co", "name": "Beta", "deploy_target": "beta", "preprod_url": beta.url,
         "deploy_hosts": [beta.host], "repo": f"file://{remote}", "persons": [{"email": "contact@beta.example"}]}]
    path = tmp_path / "directory.json"
    path.write_text(json.dumps(directory))
    imported = subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", str(path)], env=env,
                              timeout=60, cwd=stack.ROOT, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    procs = []
    states = {"spawn": tmp_path / "spawn-host", "deploy": tmp_path / "deploy-host"}

    def start(model):
        api = start_claude_api(model)
        procs.append(api)
        full = {**env, "SYNEDRE_ANTHROPIC_BASE_URL": api.url}
        hosts = (("spawn", "spawn"), ("deploy", "deploy"), ("qa,recap", "spawn"))  # queues, the host they run on
        procs.extend(stack.ready([stack.Proc("worker", stack.worker_argv(queues, 2),
                                             {**full, "SYNEDRE_STATE_DIR": str(states[host])}, services["logs"])
                                  for queues, host in hosts]))
        return api
    yield {"url": services["db"], "alpha": alpha, "beta": beta, "remote": remote, "mono": mono, "smtp": smtp,
           "start": start, "tmp": tmp_path, "states": states}
    stack.stop_all(procs)
    smtp.stop()
    alpha.stop()
    beta.stop()


def served(site, route: str) -> str:
    with urllib.request.urlopen(site.url + route, timeout=10) as r:
        return r.read().decode()


def test_two_clients_each_deploy_and_qa_their_own_site_from_their_own_repository(two):
    url = two["url"]
    mids = dict(zip(CLIENTS, make_launchable(url, two["tmp"], n=2, complexity="plan", tag="two"), strict=True))
    with psycopg.connect(url, autocommit=True) as c:
        for client, mid in mids.items():  # what the classifier decides: the sender's client
            c.execute("UPDATE synedre.email_states SET client_id = (SELECT id FROM synedre.clients"
                      " WHERE codename = %s), client_source = 'envelope' WHERE message_id = %s", (client, mid))
    together = Together({client: agent(client) for client in CLIENTS})
    two["start"](together)
    from tasks.app import app
    for mid in mids.values():
        app.send_task("synedre.spawn", args=[mid])
    done = ("actioned", "escalated", "orchestration_failed", "spawn_failed", "merge_failed")
    stack.wait_for(lambda: all(q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", m)[0][0]
                               in done for m in mids.values()), 180, "both requests to end", interval=0.5)
    statuses = {c: q(url, "SELECT status FROM synedre.email_states WHERE message_id = %s", m)[0][0]
                for c, m in mids.items()}
    assert statuses == {"alpha-co": "actioned", "beta-co": "actioned"}, (
        statuses, q(url, "SELECT message_id, event, detail FROM synedre.audit_log ORDER BY id"),
        q(url, "SELECT message_id, status, stop_reason, salvage FROM synedre.launches ORDER BY id"))
    assert together.both.is_set()
    # the two launches ran at the same time, each once
    spans = q(url, "SELECT message_id, started_at, ended_at FROM synedre.launches ORDER BY id")
    assert len(spans) == 2 and max(s for _, s, _ in spans) < min(e for _, _, e in spans), spans

    alpha, beta, remote = two["alpha"], two["beta"], two["remote"]
    # each repository holds its own client's work and nothing of the other's
    alpha_log = git(alpha.repo, "log", "--all", "--format=%s")
    remote_log = git(remote, "log", "--all", "--format=%s")
    assert "alpha-co: contact form" in alpha_log and "beta-co" not in alpha_log, alpha_log
    assert "beta-co: contact form" in remote_log and "alpha-co" not in remote_log, remote_log
    # the remote's pre-production branch holds the merged work
    assert "Formulaire de beta-co" in git(remote, "show", "main:site/contact.html")
    assert "Formulaire de alpha-co" in git(alpha.repo, "show", "main:site/contact.html")
    assert git(beta.repo, "log", "--format=%s") == "the site as the client has it"  # beta's only way is the remote
    assert git(two["mono"], "log", "--all", "--format=%s") == "monorepo"  # the fleet's default untouched

    # each site deployed from its own repository, and QA checked it there
    runs = {r[0]: r[1:] for r in q(url, "SELECT message_id, target, base_url, deploy_ok, deploy_log, verdict"
                                        " FROM synedre.qa_runs")}
    for client, site, repo in (("alpha-co", alpha, alpha.repo), ("beta-co", beta, remote)):
        target, base_url, ok, log, verdict = runs[mids[client]]
        sha = git(repo, "rev-parse", "--short", "main")
        assert (target, base_url, ok, verdict) == (CLIENTS[client], site.url, True, "passed"), runs[mids[client]]
        assert f"deploying {CLIENTS[client]} from main@{sha}" in log, log
        other = next(c for c in CLIENTS if c != client)
        page_now = served(site, "/contact")
        assert f"Formulaire de {client}" in page_now and f"Formulaire de {other}" not in page_now
    checks = q(url, "SELECT r.message_id, c.declared, c.status FROM synedre.qa_checks c"
                    " JOIN synedre.qa_runs r ON r.id = c.qa_run_id ORDER BY c.id")
    assert sorted(checks) == sorted((m, "/contact", "passed") for m in mids.values()), checks

    # spawn and deploy shared no disk: the remote was mirrored on the spawn host and checked
    # out on the deploy host, each from the remote itself
    spawn_state, deploy_state = two["states"]["spawn"], two["states"]["deploy"]
    assert [p.name for p in (spawn_state / "mirrors").iterdir() if p.is_dir()] != []
    assert not (spawn_state / "checkouts").exists() and not (deploy_state / "mirrors").exists()
    checkout, = [p for p in (deploy_state / "checkouts").iterdir() if p.is_dir()]
    assert git(checkout, "config", "--get", "remote.origin.url") == f"file://{remote}"
    assert git(checkout, "rev-parse", "HEAD") == git(remote, "rev-parse", "main")
    # one recap each, to the founder
    assert len(two["smtp"].wait_for(2, timeout=30)) == 2


def spawned(db, tmp_path, tag: str, client: str, tenant: str) -> int:
    """A run + plan message of `client` whose launch succeeded with a contract naming `tenant`."""
    mid, = make_launchable(db, tmp_path, complexity="plan", tag=tag)
    contract = {"ok": True, "tenant": tenant, "routes_to_qa": ["/"], "commits": ["abc1234"],
                "summary_md": "done", "draft_reply_for_user": None}
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("UPDATE synedre.email_states SET status = 'spawned', client_id = (SELECT id FROM synedre.clients"
                  " WHERE codename = %s) WHERE message_id = %s", (client, mid))
        c.execute("INSERT INTO synedre.launches (message_id, attempt, iteration, status, contract)"
                  " VALUES (%s, 1, 1, 'succeeded', %s)", (mid, json.dumps(contract)))
    return mid


def test_a_contract_naming_another_clients_tenant_never_deploys_that_clients_repository(db, tmp_path):
    """The launch worked in its client's repository: a contract naming another client's tenant,
    whose repository is another, is refused before any `./deploy` runs."""
    from synedre import db as database
    from synedre.config import Settings
    from synedre.db.directory import import_directory, parse_file
    from synedre.pipeline import Status
    from synedre.stages import deploy

    repos = {}
    for client in CLIENTS:
        repos[client] = repo = tmp_path / client
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "deploy").write_text(f"#!/bin/sh\necho deployed-{client}\n")
        (repo / "deploy").chmod(0o755)
        git(repo, "add", "deploy")
        git(repo, "commit", "-qm", "deploy")
    directory = json.loads((CORPUS / "directory.json").read_text())
    directory["clients"] += [{"codename": c, "name": c, "deploy_target": t, "preprod_url": f"http://{t}.test",
                              "repo": str(repos[c])} for c, t in CLIENTS.items()]
    with database.transaction() as conn:
        import_directory(conn, parse_file(json.dumps(directory).encode()))
    launched = {}
    for tenant in CLIENTS:
        mid = spawned(db, tmp_path, f"foreign-{tenant}", "alpha-co", tenant)
        launched[tenant] = deploy.run(mid, Settings(state_dir=tmp_path / "state", workspace_base_branch="main"))
    assert launched["beta-co"].status == Status.ORCHESTRATION_FAILED
    assert launched["alpha-co"].status == Status.DEPLOYED
    logs = [log for log, in q(db, "SELECT deploy_log FROM synedre.qa_runs")]
    assert logs == ["deployed-alpha-co"], logs  # beta's ./deploy never ran
    trail = q(db, "SELECT detail FROM synedre.audit_log WHERE event = 'tenant_repository_mismatch'")
    assert [(d["tenant"], d["launch_repo"], d["tenant_repo"]) for d, in trail] == [
        ("beta-co", str(repos["alpha-co"]), str(repos["beta-co"]))]


def test_a_remote_the_deploy_host_cannot_fetch_is_a_failed_deploy_that_says_why(db, tmp_path):
    from synedre import db as database
    from synedre.config import Settings
    from synedre.db.directory import import_directory, parse_file
    from synedre.pipeline import Status
    from synedre.stages import deploy

    gone = f"file://{tmp_path}/gone.git"
    directory = json.loads((CORPUS / "directory.json").read_text())
    directory["clients"].append({"codename": "beta-co", "name": "Beta", "deploy_target": "beta",
                                 "preprod_url": "http://beta.test", "repo": gone})
    with database.transaction() as conn:
        import_directory(conn, parse_file(json.dumps(directory).encode()))
    mid = spawned(db, tmp_path, "gone", "beta-co", "beta-co")
    assert deploy.run(mid, Settings(state_dir=tmp_path / "state", workspace_base_branch="main")).status \
        == Status.QA_FAILED  # a failed deploy: the iteration sees why
    (ok, log), = q(db, "SELECT deploy_ok, deploy_log FROM synedre.qa_runs WHERE message_id = %s", mid)
    assert not ok and log.startswith(f"{gone}: not deployable: git clone: exit 128") and "gone.git" in log, log
