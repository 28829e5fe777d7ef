"""Deploy to pre-production (SPEC §9.3): `./deploy <target> --preprod`, bounded and redacted."""
from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from synedre.orchestrate import deploy
from synedre.orchestrate.deploy import DeployError, run_deploy
from synedre.redact import Redactor
from tests.services.site import start_site

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

SECRET = "preprod-Tok3n-9f8e7d6c5b4a"


class Spy:
    """A real redactor, counting what it was given."""

    def __init__(self, secrets: list[str]):
        self.redactor = Redactor(secrets)
        self.calls: list[str] = []

    def __call__(self, text: str) -> str:
        self.calls.append(text)
        return self.redactor.redact_text(text)


@pytest.fixture
def site(tmp_path):
    s = start_site(tmp_path / "site")
    yield s
    s.stop()


def script_repo(tmp_path: Path, body: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "deploy").write_text("#!/usr/bin/env bash\n" + body)
    (repo / "deploy").chmod(0o755)
    return repo


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def test_deploy_publishes_the_trunk_with_its_sitemap(site):
    spy = Spy([SECRET])
    site.commit({"site/contact.html": "<h1>Nous écrire</h1>"})
    (site.repo / "site" / "about.html").write_text("uncommitted work tree edit")

    result = run_deploy(site.repo, site.target, timeout_s=20, redact=spy)

    assert result.ok and result.exit_code == 0 and not result.timed_out, result.log_tail
    assert "deploying acme from main@" in result.log_tail and "published 3 pages to acme" in result.log_tail
    assert spy.calls, "the log went through redact"
    assert "Nous écrire" in get(site.url + "/contact")
    assert "uncommitted" not in get(site.url + "/about")  # the trunk, not the work tree
    assert "https://www.acme.example/contact</loc>" in get(site.url + "/sitemap.xml")


def test_failing_deploy_is_not_ok_and_its_tail_is_redacted(tmp_path):
    repo = script_repo(tmp_path, f'echo "rsync to preprod with token={SECRET}"\n'
                                 f'echo "auth failed for {SECRET}" >&2\nexit 3\n')
    spy = Spy([SECRET])

    result = run_deploy(repo, "acme", timeout_s=10, redact=spy)

    assert not result.ok and result.exit_code == 3 and not result.timed_out
    assert SECRET in spy.calls[-1], "redact was given the raw tail, stdout and stderr"
    assert SECRET not in result.log_tail and "[REDACTED" in result.log_tail
    assert "rsync to preprod" in result.log_tail and "auth failed" in result.log_tail


def test_slow_deploy_is_killed_with_its_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    repo = script_repo(tmp_path, f'trap "" TERM\nsleep 300 &\necho $! > {pidfile}\n'
                                 f'echo "waiting on {SECRET}"\nwait\n')
    spy = Spy([SECRET])
    started = time.monotonic()

    result = run_deploy(repo, "acme", timeout_s=1.0, redact=spy)

    assert result.timed_out and not result.ok
    # ignored SIGTERM, so it took the SIGKILL after the grace
    assert deploy.KILL_GRACE_S <= time.monotonic() - started < deploy.KILL_GRACE_S + deploy.DRAIN_S + 5
    assert SECRET not in result.log_tail and "waiting on [REDACTED" in result.log_tail
    assert "[deploy killed after 1 s]" in result.log_tail
    child = int(pidfile.read_text())

    def gone() -> bool:  # SIGKILL is delivered asynchronously: on a loaded machine, a moment later
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    deadline = time.monotonic() + 5
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()


def test_background_helper_holding_the_output_does_not_hold_the_deploy(tmp_path):
    pidfile = tmp_path / "helper.pid"
    repo = script_repo(tmp_path, f'sleep 30 &\necho $! > {pidfile}\necho done\nexit 0\n')

    result = run_deploy(repo, "acme", timeout_s=20, redact=str)

    assert result.ok and result.log_tail == "done"
    assert result.duration_s < deploy.DRAIN_S + 3
    helper = psutil.Process(int(pidfile.read_text()))
    assert helper.is_running(), "a successful deploy's helpers are left alone"
    helper.kill()


def test_tail_keeps_the_last_lines_and_splits_an_endless_line(tmp_path):
    repo = script_repo(tmp_path, 'for i in $(seq 1 1000); do echo "line $i"; done\n'
                                 f'head -c {deploy.MAX_LINE_CHARS * 3} /dev/zero | tr "\\0" x\n')

    result = run_deploy(repo, "acme", timeout_s=20, redact=str)

    lines = result.log_tail.splitlines()
    assert len(lines) == deploy.TAIL_LINES
    assert lines[-4] == "line 1000" and lines[-3:] == ["x" * deploy.MAX_LINE_CHARS] * 3


def test_missing_script_is_a_failed_deploy_not_an_exception(tmp_path):
    result = run_deploy(tmp_path, "acme", timeout_s=5, redact=str)

    assert not result.ok and result.exit_code is None and "could not start" in result.log_tail


@pytest.mark.parametrize("target", ["--preprod", "../etc", "a b", "", "x" * 65])
def test_target_that_is_not_a_tenant_name_is_refused(tmp_path, target):
    with pytest.raises(DeployError):
        run_deploy(tmp_path, target, timeout_s=5, redact=str)


def test_deploy_gets_a_minimal_environment_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNEDRE_DATABASE_URL", "postgresql://u:pw@h/db")
    repo = script_repo(tmp_path, 'env | sort | cut -d= -f1\n')

    result = run_deploy(repo, "acme", timeout_s=10, redact=str)

    assert set(result.log_tail.split()) <= {"HOME", "LANG", "PATH", "PWD", "SHLVL", "_", "OLDPWD"}
    assert os.environ["SYNEDRE_DATABASE_URL"] and "SYNEDRE" not in result.log_tail
