"""Deploy to pre-production (SPEC §9.3, §13): `./deploy <target> --preprod`, bounded, redacted and
confined: a fresh checkout, as its own unprivileged user, inside the sandbox runtime (`srt`),
reaching only the tenant's hosts, reading none of the fleet's files."""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from synedre.config import Settings
from synedre.orchestrate import deploy
from synedre.orchestrate.deploy import DeployError
from synedre.stages.deploy import Topology, deploy as stage_deploy
from tests.services.site import start_site

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="the deploy switches to its own user: a root worker"),
              pytest.mark.skipif(shutil.which("srt") is None, reason="no sandbox runtime (scripts/system-deps)")]

SECRET = "preprod-Tok3n-9f8e7d6c5b4a"
DEPLOY_USER = "synedre-deploy"


@pytest.fixture
def site(tmp_path):
    s = start_site(tmp_path / "site")
    yield s
    s.stop()


def script_repo(tmp_path: Path, body: str) -> Path:
    """A client repository whose main holds `deploy` (the trunk is what deploys)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "deploy").write_text("#!/usr/bin/env bash\n" + body)
    (repo / "deploy").chmod(0o755)
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "T",
           "GIT_COMMITTER_EMAIL": "t@x"}
    for args in (["init", "-q", "-b", "main"], ["add", "deploy"], ["commit", "-qm", "deploy"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env, timeout=30)
    return repo


def run(repo: Path, tmp_path: Path, timeout_s: float = 20, hosts: tuple[str, ...] = (), env: tuple[str, ...] = (),
        **settings: object) -> deploy.DeployResult:
    """The deploy stage's own path: `stages.deploy.deploy`."""
    s = Settings(state_dir=tmp_path / "state", workspace_base_branch="main", deploy_timeout_s=timeout_s, **settings)
    result = stage_deploy(str(repo), Topology("acme", None, hosts, env), s)
    assert isinstance(result, deploy.DeployResult)
    return result


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def deploy_user_processes(cmdline: list[str]) -> list[psutil.Process]:
    """Live processes of the deploy user running `cmdline`: what this test's deploy started
    (another test's deploy may run beside it under pytest-xdist)."""
    uid = pwd.getpwnam(DEPLOY_USER).pw_uid
    return [p for p in psutil.process_iter(["uids", "cmdline", "status"])
            if p.info["uids"] and p.info["uids"].real == uid and p.info["cmdline"] == cmdline
            and p.info["status"] != psutil.STATUS_ZOMBIE]


class Listener:
    """A loopback TCP server that records every connection and what it was sent."""

    def __init__(self, host: str = "127.0.0.1"):
        self.sock = socket.create_server((host, 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.received.append(conn.recv(65536) or b"<connected>")
                except OSError:
                    self.received.append(b"<connected>")

    def close(self):
        self._stop.set()
        self.sock.close()


def test_deploy_publishes_the_trunk_with_its_sitemap(site, tmp_path):
    site.commit({"site/contact.html": "<h1>Nous écrire</h1>"})
    (site.repo / "site" / "about.html").write_text("uncommitted work tree edit")

    result = site.deploy(tmp_path / "state")

    assert result.ok and result.exit_code == 0 and not result.timed_out, result.log_tail
    assert "deploying acme from main@" in result.log_tail and "published 3 pages to acme" in result.log_tail
    assert result.head == subprocess.run(["git", "-C", str(site.repo), "rev-parse", "main"], capture_output=True,
                                         text=True, check=True).stdout.strip()
    assert not list((tmp_path / "state" / "deploys").iterdir()), "the deploy's checkout is removed after"
    assert "Nous écrire" in get(site.url + "/contact")
    assert "uncommitted" not in get(site.url + "/about")  # the trunk, not the work tree
    assert "https://www.acme.example/contact</loc>" in get(site.url + "/sitemap.xml")


def test_failing_deploy_is_not_ok_and_its_tail_is_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("PREPROD_TOKEN", SECRET)
    repo = script_repo(tmp_path, 'echo "rsync to preprod with token=$PREPROD_TOKEN"\n'
                                 'echo "auth failed for $PREPROD_TOKEN" >&2\nexit 3\n')

    result = run(repo, tmp_path, env=("PREPROD_TOKEN",))

    assert not result.ok and result.exit_code == 3 and not result.timed_out
    assert SECRET not in result.log_tail and "[REDACTED" in result.log_tail  # a declared variable is a secret
    assert "rsync to preprod" in result.log_tail and "auth failed" in result.log_tail


def test_slow_deploy_is_killed_with_its_whole_process_group(tmp_path, monkeypatch):
    monkeypatch.setenv("PREPROD_TOKEN", SECRET)
    repo = script_repo(tmp_path, 'trap "" TERM\nsleep 300 &\necho "waiting on $PREPROD_TOKEN"\nwait\n')
    started = time.monotonic()

    result = run(repo, tmp_path, timeout_s=2.0, env=("PREPROD_TOKEN",))

    assert result.timed_out and not result.ok
    assert time.monotonic() - started < deploy.KILL_GRACE_S + deploy.DRAIN_S + 15
    assert SECRET not in result.log_tail and "waiting on [REDACTED" in result.log_tail
    assert "[deploy killed after 2 s]" in result.log_tail
    deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously: on a loaded machine, a moment later
    while deploy_user_processes(["sleep", "300"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p.info for p in deploy_user_processes(["sleep", "300"])] == []


def test_background_helper_holding_the_output_does_not_hold_the_deploy_nor_outlive_it(tmp_path):
    repo = script_repo(tmp_path, 'sleep 30 &\necho done\nexit 0\n')

    result = run(repo, tmp_path)

    assert result.ok and result.log_tail.strip() == "done", result.log_tail
    assert result.duration_s < deploy.DRAIN_S + 10
    time.sleep(0.5)  # the sandbox ends with its script: nothing of it stays on the host
    assert [p.info for p in deploy_user_processes(["sleep", "30"])] == []


def test_tail_keeps_the_last_lines_and_splits_an_endless_line(tmp_path):
    repo = script_repo(tmp_path, 'for i in $(seq 1 1000); do echo "line $i"; done\n'
                                 f'head -c {deploy.MAX_LINE_CHARS * 3} /dev/zero | tr "\\0" x\n')

    result = run(repo, tmp_path)

    lines = result.log_tail.splitlines()
    assert len(lines) == deploy.TAIL_LINES
    assert lines[-4] == "line 1000" and lines[-3:] == ["x" * deploy.MAX_LINE_CHARS] * 3


def test_missing_script_is_a_failed_deploy_not_an_exception(tmp_path):
    repo = script_repo(tmp_path, "")
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@x", "rm", "-q", "deploy"],
                   check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "rm"],
                   check=True)

    result = run(repo, tmp_path)

    assert not result.ok and result.exit_code is None and "could not start" in result.log_tail


@pytest.mark.parametrize("target", ["--preprod", "../etc", "a b", "", "x" * 65])
def test_target_that_is_not_a_tenant_name_is_refused(tmp_path, target):
    with pytest.raises(DeployError):
        deploy.run_deploy(tmp_path, target, 5, str, deploy.Confinement("srt", DEPLOY_USER))


def test_deploy_gets_only_the_variables_its_tenant_declares(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNEDRE_DATABASE_URL", "postgresql://u:pw@h/db")
    monkeypatch.setenv("PREPROD_TOKEN", SECRET)
    monkeypatch.setenv("UNDECLARED_TOKEN", "not-for-the-deploy")
    repo = script_repo(tmp_path, 'env | cut -d= -f1 | sort\n')

    result = run(repo, tmp_path, env=("PREPROD_TOKEN",))

    names = set(result.log_tail.split())
    assert "PREPROD_TOKEN" in names and "UNDECLARED_TOKEN" not in names, names
    assert not [n for n in names if n.startswith(("SYNEDRE", "ANTHROPIC", "MISTRAL"))], names
    assert "not-for-the-deploy" not in result.log_tail


def test_the_deploy_runs_as_its_own_user_writes_only_its_checkout_and_reads_nothing_of_the_fleet(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "fleet-file").write_text("state-secret")
    (state / "fleet-file").chmod(0o644)
    registry = tmp_path / "mailboxes.toml"
    registry.write_text("registry-secret")
    registry.chmod(0o644)  # world-readable: only the sandbox keeps it out
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)
    checkout_sh = Path(__file__).resolve()
    repo = script_repo(tmp_path, f"""id -un; id -u
cat {state}/fleet-file || echo READ-STATE-REFUSED
cat {registry} || echo READ-REGISTRY-REFUSED
cat {checkout_sh} | head -c 20 || true; test -s {checkout_sh} && echo READ-CHECKOUT || echo READ-CHECKOUT-REFUSED
echo x > {outside}/written || echo WRITE-OUTSIDE-REFUSED
echo x > /tmp/deploy-marker-$$ || echo WRITE-TMP-REFUSED
echo x > ./written-in-checkout && echo WRITE-CHECKOUT-OK
""")

    result = run(repo, tmp_path, mailboxes_file=registry)

    log = result.log_tail
    assert result.ok, log
    assert log.splitlines()[:2] == [DEPLOY_USER, str(pwd.getpwnam(DEPLOY_USER).pw_uid)], log
    for refused in ("READ-STATE-REFUSED", "READ-REGISTRY-REFUSED", "READ-CHECKOUT-REFUSED", "WRITE-OUTSIDE-REFUSED",
                    "WRITE-TMP-REFUSED", "WRITE-CHECKOUT-OK"):
        assert refused in log, log
    assert "state-secret" not in log and "registry-secret" not in log
    assert not (outside / "written").exists() and not list(Path("/tmp").glob("deploy-marker-*"))


def test_a_tenant_s_deploy_reaches_its_declared_host_and_no_other(site, tmp_path):
    others = [Listener("127.0.0.1"), Listener("127.0.0.2")]
    try:
        ports = " ".join(f"http://{h}:{o.port}/" for h, o in zip(("127.0.0.1", "127.0.0.2"), others, strict=True))
        site.commit({"deploy": site.repo.joinpath("deploy").read_text() + f"""
for url in {ports} http://{site.host}/contact; do
  if curl -fsS -m 5 -o /dev/null "$url"; then echo "REACHED $url"; else echo "REFUSED $url"; fi
done
for port in {others[0].port} {others[1].port}; do
  (exec 3<>/dev/tcp/127.0.0.1/$port && echo raw >&3 && echo "RAW-REACHED $port") 2>/dev/null || echo "RAW-REFUSED $port"
done
"""})
        result = site.deploy(tmp_path / "state")
    finally:
        for o in others:
            o.close()
    log = result.log_tail
    assert result.ok and "published 3 pages to acme" in log, log
    assert f"REACHED http://{site.host}/contact" in log  # its declared host, through the sandbox's proxy
    assert all(f"REFUSED http://{h}:{o.port}/" in log for h, o in zip(("127.0.0.1", "127.0.0.2"), others, strict=True))
    assert "RAW-REACHED" not in log
    assert [o.received for o in others] == [[], []]


def test_a_deploy_whose_sandbox_cannot_start_fails_closed_and_runs_nothing(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    marker.parent.chmod(0o777)
    repo = script_repo(tmp_path, f"touch {marker}\n")
    bin_dir = tmp_path / "bin"  # the PATH without srt: everything else the deploy would use
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env", "git", "node", "bwrap", "socat", "rg", "touch", "curl"):
        if (found := shutil.which(tool)) and tool != "srt":
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))

    result = run(repo, tmp_path)

    assert not result.ok and result.exit_code is None and result.head is None
    assert "deploy sandbox unavailable" in result.log_tail and "srt" in result.log_tail, result.log_tail
    assert not marker.exists()
    assert not (tmp_path / "state" / "deploys").exists() or not list((tmp_path / "state" / "deploys").iterdir())


def test_status_says_whether_the_deploy_can_run_confined(tmp_path):
    from synedre import health

    ok = health.check_deploy_sandbox(Settings(state_dir=tmp_path))
    assert ok.ok and ok.detail == f"runs as {DEPLOY_USER} inside srt", ok
    missing = health.check_deploy_sandbox(Settings(state_dir=tmp_path, deploy_user="no-such-user"))
    assert not missing.ok and "'no-such-user' does not exist" in missing.detail
    assert "every deploy fails" in missing.detail
    root = health.check_deploy_sandbox(Settings(state_dir=tmp_path, deploy_user="root"))
    assert not root.ok and "is root" in root.detail
    nosrt = health.check_deploy_sandbox(Settings(state_dir=tmp_path, deploy_sandbox="srt-not-installed"))
    assert not nosrt.ok and "srt-not-installed" in nosrt.detail


def test_the_deploy_stage_ends_deploy_failed_with_the_reason_when_its_sandbox_is_missing(db, tmp_path, monkeypatch):
    """Acceptance 3 through the stage: the message's deploy is `deploy_failed` (a failed check),
    the reason in its run's log, and nothing of `./deploy` ran."""
    import json

    import psycopg

    from synedre.pipeline import Status
    from synedre.stages import deploy as stage
    from tests.spawn.test_launch_e2e import make_launchable

    marker = tmp_path / "ran"
    tmp_path.chmod(0o777)  # the deploy user could write the marker, were the script run at all
    repo = script_repo(tmp_path, f"touch {marker}\n")
    mid, = make_launchable(db, tmp_path, complexity="plan", tag="nosandbox")
    contract = {"ok": True, "tenant": "acme", "routes_to_qa": ["/"], "commits": ["abc1234"], "summary_md": "done",
                "draft_reply_for_user": None}
    with psycopg.connect(db, autocommit=True) as c:
        cid = c.execute("INSERT INTO synedre.clients (codename, name, deploy_target) VALUES ('acme', 'Acme', 'acme')"
                        " RETURNING id").fetchone()[0]
        c.execute("INSERT INTO synedre.tenant_topology (client_id, deploy_target, config) VALUES (%s, 'acme', %s)",
                  (cid, json.dumps({"preprod_url": "http://127.0.0.2:9", "repo": str(repo)})))
        c.execute("UPDATE synedre.email_states SET status = 'spawned', client_id = %s WHERE message_id = %s",
                  (cid, mid))
        c.execute("INSERT INTO synedre.launches (message_id, attempt, iteration, status, contract)"
                  " VALUES (%s, 1, 1, 'succeeded', %s)", (mid, json.dumps(contract)))
    bin_dir = tmp_path / "bin"  # srt removed from the PATH, the rest kept
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env", "git", "node", "bwrap", "socat", "rg", "touch"):
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))

    result = stage.run(mid, Settings(state_dir=tmp_path / "state", workspace_base_branch="main"))

    assert result.status == Status.QA_FAILED
    with psycopg.connect(db) as c:
        events = [e for e, in c.execute("SELECT event FROM synedre.audit_log WHERE message_id = %s", (mid,))]
        ok, log = c.execute("SELECT deploy_ok, deploy_log FROM synedre.qa_runs WHERE message_id = %s",
                            (mid,)).fetchone()
    assert "deploy_failed" in events and ok is False
    assert "deploy sandbox unavailable: not on the PATH: srt" in log, log
    assert not marker.exists()
