"""`synedre fleet`: one command runs beat, workers and IDLE; Ctrl-C stops it all cleanly."""
import contextlib
import os
import signal
import sys

import psutil
import psycopg
import pytest

from tests.conftest import CORPUS
from tests.services import stack


def test_beat_started_without_celery_s_command_line_sends_the_sweep_on_its_period(redis_db, tmp_path):
    """`python -m tasks beat` (the fleet's beat): RedBeat, the app's schedule, the sweep queued
    on the poll queue every SYNEDRE_SWEEP_EVERY_S."""
    env = {**os.environ, "SYNEDRE_SWEEP_EVERY_S": "1", "SYNEDRE_MAILBOXES_FILE": str(tmp_path / "none.toml")}
    beat = stack.celery_beat(env, tmp_path)
    try:
        def sweeps() -> int:
            return sum(b'"synedre.sweep"' in m for m in redis_db.lrange("poll", 0, -1))
        stack.wait_for(lambda: sweeps() >= 2, 30, "two sweeps sent by beat")
        assert "redbeat.schedulers.RedBeatScheduler" in beat.output() and "Traceback" not in beat.output()
        assert beat.proc.args[1:4] == ["-m", "tasks", "beat"]  # not Celery's command line
    finally:
        beat.end()


@pytest.mark.timeout(180)
def test_fleet_ingests_new_mail_through_idle_and_stops_cleanly_on_ctrl_c(services):
    # Beat's safety-net poll is pushed out of the way: only IDLE can bring the mail in.
    env = {**services["env"], "SYNEDRE_POLL_INTERVAL_S": "3600"}
    fleet = stack.Proc("fleet", [sys.executable, "-m", "synedre.cli", "fleet", "--grace", "30"],
                       env, services["logs"])
    children = []
    try:
        fleet.wait_output("idle_watching", timeout=60)
        fleet.wait_output(" ready.", timeout=60)
        children = psutil.Process(fleet.pid).children(recursive=True)
        assert {"beat", "worker", "idle"} <= {w for c in children for w in c.cmdline()}
        with services["dovecot"].client() as c:
            c.append("INBOX", (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes())

        def stored():
            with psycopg.connect(services["db"]) as conn:
                return conn.execute("SELECT event FROM synedre.audit_log ORDER BY id").fetchall()
        # the scan worker may already have moved it on: what matters is that it came in
        assert stack.wait_for(stored, 20, "the IDLE-triggered poll to store the mail")[0] == ("poll_inserted",)

        fleet.proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C delivers
        assert fleet.proc.wait(60) == 0
        assert "fleet_stopped" in fleet.output()
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    finally:
        fleet.stop(signal.SIGKILL)
        for c in children:  # each child has its own session: SIGKILL of the fleet spares them
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass


def test_fleet_without_a_mailbox_says_what_to_configure(db, redis_db):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "SYNEDRE_MAILBOXES_FILE"}
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "fleet"], env=env, cwd=stack.ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "SYNEDRE_MAILBOXES_FILE" in out.stderr and "password_env" in out.stderr


@pytest.mark.timeout(120)
def test_killing_the_fleet_outright_takes_its_workers_down(services):
    env = {**services["env"], "SYNEDRE_POLL_INTERVAL_S": "3600"}
    fleet = stack.Proc("fleet", [sys.executable, "-m", "synedre.cli", "fleet"], env, services["logs"])
    children = []
    try:
        fleet.wait_output("idle_watching", timeout=60)
        children = psutil.Process(fleet.pid).children()
        assert len(children) >= 3
        fleet.proc.kill()  # SIGKILL: no chance to stop anyone itself
        fleet.proc.wait(10)
        gone, alive = psutil.wait_procs(children, timeout=60)
        assert alive == []
    finally:
        fleet.stop(signal.SIGKILL)
        for c in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                c.kill()
