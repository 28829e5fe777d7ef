"""`synedre flower`: Flower on loopback, never without authentication, its credentials never
in a command line; `synedre fleet --flower` runs it as one more supervised child."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

import psutil
import pytest

from synedre import secrets
from synedre.config import Settings
from synedre.pipeline import WORKER_GROUPS, group_queues
from tests.services import stack

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-gpu"]
# The dashboard screenshot is kept under the test's tmp dir and copied here (git-ignored build/).
ARTIFACT = stack.ROOT / "build" / "test-artifacts" / "flower-dashboard.png"
USER, PASSWORD = "ops", "Fl0wer-test-pw-7c1e"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWER_BASIC_AUTH", "SYNEDRE_FLOWER_AUTH_FILE")}
    return {**env, **extra}


def _get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""


@pytest.fixture(autouse=True)
def _no_flower_credentials_from_outside(monkeypatch):
    monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    monkeypatch.delenv("SYNEDRE_FLOWER_AUTH_FILE", raising=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("raw, reason", [
    (None, "no Flower credentials"),
    ("", "no Flower credentials"),
    ("admin", "entry 1 is not user:password"),
    ("admin:pw,:pw2", "entry 2 is not user:password"),
    ("admin:", "entry 1 is not user:password"),
])
def test_flower_credentials_that_are_missing_or_malformed_are_refused_without_quoting_them(raw, reason):
    s = Settings(_env_file=None, **({} if raw is None else {"FLOWER_BASIC_AUTH": raw}))
    auth, why = s.flower_auth()
    assert auth is None and why is not None and reason in why
    assert raw is None or not raw or raw not in why


def test_flower_credentials_come_from_the_variable_first_then_the_file(tmp_path):
    path = tmp_path / "flower-auth"
    path.write_text("ops:pw-one\n\nadmin:pw-two\n")
    from_file = Settings(_env_file=None, flower_auth_file=path)
    assert from_file.flower_auth()[0].get_secret_value() == "ops:pw-one,admin:pw-two"  # type: ignore[union-attr]
    assert {"ops:pw-one", "pw-one", "admin:pw-two", "pw-two"} <= set(secrets.values(from_file))
    both = Settings(_env_file=None, flower_auth_file=path, FLOWER_BASIC_AUTH="env:pw-env")
    assert both.flower_auth()[0].get_secret_value() == "env:pw-env"  # type: ignore[union-attr]
    unreadable = Settings(_env_file=None, flower_auth_file=tmp_path / "absent")
    assert unreadable.flower_auth() == (None, f"Flower credentials unreadable ({tmp_path / 'absent'}: "
                                              "FileNotFoundError)")


def test_flower_without_credentials_refuses_to_start_and_says_where_to_put_them():
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "flower"], env=_env(), cwd=stack.ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "FLOWER_BASIC_AUTH" in out.stderr and "SYNEDRE_FLOWER_AUTH_FILE" in out.stderr
    assert "without authentication" in out.stderr


def test_fleet_with_flower_refuses_to_start_without_its_credentials(tmp_path):
    registry = tmp_path / "mailboxes.toml"
    registry.write_text('[mailboxes.atlas]\nimap_host = "127.0.0.1"\nimap_port = 1\nimap_tls = false\n'
                        'smtp_host = "127.0.0.1"\nsmtp_port = 1\nsmtp_tls = false\nusername = "atlas"\n'
                        'password_env = "TEST_ATLAS_PASSWORD"\nfolder = "INBOX"\n')
    env = _env(SYNEDRE_MAILBOXES_FILE=str(registry), TEST_ATLAS_PASSWORD="not-used")
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "fleet", "--flower"], env=env, cwd=stack.ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--flower" in out.stderr and "FLOWER_BASIC_AUTH" in out.stderr


def test_the_fleet_runs_flower_as_one_more_child_only_when_asked(monkeypatch):
    from synedre import fleet

    monkeypatch.setenv("FLOWER_BASIC_AUTH", f"{USER}:{PASSWORD}")
    assert "flower" not in {c.name for c in fleet.children()}
    kids = {c.name: c for c in fleet.children(flower=True)}
    assert kids["flower"].argv[1:] == ["-m", "synedre.cli", "flower"]
    assert not [c for c in kids.values() if PASSWORD in " ".join(c.argv) + " ".join(c.env.values())]


def _node(worker: stack.Proc) -> str:
    found = re.search(r"(test-[0-9a-f]{8}@\S+) ready\.", worker.output())
    assert found, worker.output()[-2000:]
    return found.group(1)


def _cmdlines() -> dict[int, str]:
    """Every process's argv (/proc/*/cmdline), readable by any user of the machine."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # gone meanwhile
                pass
    return out


@pytest.mark.timeout(120)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium (/usr/bin/chromium) is missing")
def test_flower_shows_every_worker_group_behind_authentication_on_loopback_only(redis_db, tmp_path, capsys):
    from playwright.sync_api import sync_playwright

    logs = tmp_path / "logs"
    logs.mkdir()
    # The credentials come from a file here (a mounted secret); the variable is tested above.
    auth_file = tmp_path / "flower-auth"
    auth_file.write_text(f"{USER}:{PASSWORD}\n")
    auth_file.chmod(0o600)
    env = _env(SYNEDRE_FLOWER_AUTH_FILE=str(auth_file))
    port = _free_port()
    workers: dict[str, stack.Proc] = {}
    flower = None
    try:
        # One real worker per group of the pipeline table, on its queues. The solo pool keeps
        # the two shared cores free: what Flower shows is the workers, not their pools.
        workers = dict(zip(WORKER_GROUPS, stack.celery_workers(
            env, logs, *((",".join(group_queues(group)), 1, "solo") for group in WORKER_GROUPS)), strict=True))
        nodes = {group: _node(w) for group, w in workers.items()}
        flower = stack.Proc("flower", [sys.executable, "-m", "synedre.cli", "flower", "--port", str(port)],
                            env, logs)
        flower.wait_output("Visit me at", timeout=60)
        base = f"http://127.0.0.1:{port}"

        # Flower itself (`synedre flower` execs it), listening on loopback only.
        listening = [c for c in psutil.Process(flower.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and {c.laddr.ip for c in listening} == {"127.0.0.1"}, listening
        assert {c.laddr.port for c in listening} == {port}

        # No credential in any process's argv; Flower got them through its environment.
        leaks = {pid: argv for pid, argv in _cmdlines().items() if PASSWORD in argv}
        assert leaks == {}
        environ = Path(f"/proc/{flower.pid}/environ").read_bytes().split(b"\0")
        assert f"FLOWER_BASIC_AUTH={USER}:{PASSWORD}".encode() in environ

        for path in ("/", "/workers", "/broker", "/api/workers", "/api/task/types"):
            assert _get(base + path)[0] == 401, path
        assert _get(base + "/", (USER, "wrong"))[0] == 401

        def workers_seen():
            code, body = _get(base + "/api/workers?refresh=1", (USER, PASSWORD))
            assert code == 200
            return set(nodes.values()) <= set(json.loads(body))
        stack.wait_for(workers_seen, 30, "every worker in Flower's API", interval=0.5)
        assert _get(base + "/", (USER, PASSWORD))[0] == 200

        def broker_queues() -> str:
            code, body = _get(base + "/broker", (USER, PASSWORD))
            assert code == 200
            return body
        assert all(f">{q}<" in broker_queues() for g in WORKER_GROUPS for q in group_queues(g))

        shot = tmp_path / "flower-dashboard.png"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            try:
                context = browser.new_context(http_credentials={"username": USER, "password": PASSWORD},
                                              viewport={"width": 1400, "height": 900})
                page = context.new_page()
                page.goto(base + "/", wait_until="networkidle")
                for node in nodes.values():
                    page.get_by_text(node, exact=True).first.wait_for(timeout=20_000)
                text = page.inner_text("body")
                page.screenshot(path=str(shot), full_page=True)
            finally:
                browser.close()
        # Flower breaks a long name after its first hyphen (a <wbr>): compare without whitespace.
        flat = re.sub(r"\s+", "", text)
        missing = [n for n in nodes.values() if n not in flat]
        assert missing == [], text
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, ARTIFACT)
        with capsys.disabled():
            print(f"\nFlower dashboard screenshot: {shot} (copied to {ARTIFACT})")

        # Flower's broker page lists only the queues some worker consumes (with Redis it cannot
        # ask the broker for its queues: --broker-api is RabbitMQ's management API only). A
        # queue whose consumer was cancelled drops out of it; `synedre status` still shows it.
        spawn_node = nodes["spawn"]
        from tasks.app import app as celery

        celery.control.cancel_consumer("spawn", destination=[spawn_node], reply=True, timeout=5)
        _get(base + "/?refresh=1", (USER, PASSWORD))

        def spawn_gone():
            time.sleep(0.5)
            _get(f"{base}/worker/{spawn_node}", (USER, PASSWORD))
            return ">spawn<" not in broker_queues()
        stack.wait_for(spawn_gone, 20, "Flower to notice the cancelled consumer", interval=0.5)
        from synedre import health, kv

        assert "spawn" in health.queue_depths(kv.client())
    finally:
        if flower is not None:
            flower.stop()
        stack.stop_all(workers.values())
