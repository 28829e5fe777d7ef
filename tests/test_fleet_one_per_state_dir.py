"""One fleet per state directory (issue 27): a second `synedre fleet` is refused in one line
naming the first's pid, touching nothing; `synedre db stop` refuses while a fleet runs; no
process stops an embedded database another one started."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from synedre import db
from synedre.config import Settings
from tests.services import stack

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


def synedre(env: dict[str, str], *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synedre.cli", *argv], env=env, cwd=stack.ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def embedded(dovecot, redis_db, tmp_path):
    """An environment on an embedded database of its own (none configured), its mailbox a
    real Dovecot; the database stopped at the end whatever happened."""
    env = {k: v for k, v in os.environ.items() if k != "SYNEDRE_DATABASE_URL"}
    env.update(stack.mailbox_env(dovecot, tmp_path), SYNEDRE_STATE_DIR=str(tmp_path / "state"),
               SYNEDRE_POLL_INTERVAL_S="3600")
    settings = Settings(state_dir=tmp_path / "state")
    yield env, settings
    if db.embedded_running(settings):
        db.stop_embedded(settings)


def test_a_second_fleet_is_refused_and_no_ctrl_c_stops_a_database_it_did_not_start(embedded, tmp_path):
    env, settings = embedded
    assert synedre(env, "db", "upgrade").returncode == 0  # as the README does: this command starts it
    assert db.embedded_running(settings)
    first = stack.Proc("fleet", [sys.executable, "-m", "synedre.cli", "fleet", "--grace", "20"], env, tmp_path)
    children: list[psutil.Process] = []
    try:
        first.wait_output("database ready", timeout=120)
        children = psutil.Process(first.pid).children(recursive=True)

        second = synedre(env, "fleet")
        assert second.returncode == 1 and second.stdout == ""
        assert second.stderr == (f"error: a fleet already runs on {settings.state_dir} (pid {first.pid}): one fleet"
                                 " per state directory; stop that one first (Ctrl-C), or set another"
                                 " SYNEDRE_STATE_DIR\n")
        assert db.embedded_running(settings) and first.alive()

        # a Ctrl-C to a second one, wherever it is in its start, stops nothing of the first's
        again = subprocess.Popen([sys.executable, "-m", "synedre.cli", "fleet"], env=env, cwd=stack.ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5)
        again.send_signal(signal.SIGINT)
        again.communicate(timeout=60)
        assert again.returncode != 0
        assert db.embedded_running(settings) and first.alive()

        stop = synedre(env, "db", "stop")
        assert stop.returncode == 1 and f"a fleet runs on {settings.state_dir} (pid {first.pid})" in stop.stderr
        assert len(stop.stderr.splitlines()) == 1 and db.embedded_running(settings)

        first.proc.send_signal(signal.SIGINT)  # the first fleet's own Ctrl-C
        assert first.proc.wait(90) == 0
        assert "embedded database left running" in first.output()
        assert db.embedded_running(settings)  # `db upgrade` started it, not this fleet
        stopped = synedre(env, "db", "stop")  # no fleet any more: allowed
        assert stopped.returncode == 0 and stopped.stdout == "embedded database stopped\n", stopped.stderr
        assert not db.embedded_running(settings)
    finally:
        first.stop(signal.SIGKILL)
        for c in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                c.kill()


def test_a_fleet_stops_the_database_it_started_itself(embedded, tmp_path):
    env, settings = embedded
    assert not db.embedded_running(settings)
    fleet = stack.Proc("fleet", [sys.executable, "-m", "synedre.cli", "fleet", "--grace", "20"], env, tmp_path)
    try:
        fleet.wait_output("database ready", timeout=120)
        assert db.embedded_running(settings)
        fleet.wait_output("fleet_child_started", timeout=60)  # its Ctrl-C handler is in place
        fleet.proc.send_signal(signal.SIGINT)
        assert fleet.proc.wait(90) == 0
        assert "embedded database stopped" in fleet.output() and not db.embedded_running(settings)
    finally:
        fleet.stop(signal.SIGKILL)
