"""Dovecot killed during IDLE: the real watcher notices, waits without spinning, comes back
within seconds of the server's return and IDLE announces the next mail at once."""
from __future__ import annotations

import os
import signal
import time
from email.message import EmailMessage

import imapclient
import psutil
import pytest

from tests.services import stack
from tests.services.dovecot import Dovecot, _launch

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(120)]

OUTAGE_S = 8.0
RECONNECT_WITHIN_S = 10.0
IDLE_LATENCY_S = 1.0
MAX_CPU_SHARE = 0.20


def crash(dc: Dovecot) -> None:
    """SIGKILL the whole server, as a crash would: no BYE, the kernel closes the sockets."""
    proc, dc.process = dc.process, None
    assert proc is not None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def restart_on_same_port(dc: Dovecot, timeout: float = 15.0) -> float:
    """Start Dovecot again on its old port and data; returns when it accepts a login."""
    dc.process = _launch(dc.base_dir, dc.port, dc.username, dc.password)

    def accepts_login() -> bool:
        assert dc.process is not None and dc.process.poll() is None, "Dovecot exited on restart"
        try:
            dc.client().logout()
            return True
        except (OSError, imapclient.exceptions.IMAPClientError):
            return False

    stack.wait_for(accepts_login, timeout, "Dovecot to accept a login again", interval=0.02)
    return time.monotonic()


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def mail(subject: str) -> bytes:
    m = EmailMessage()
    m["From"], m["To"], m["Subject"] = "client@example.org", "atlas@example.org", subject
    m["Message-ID"] = f"<{subject}@example.org>"
    m.set_content("hello")
    return m.as_bytes()


def test_watcher_reconnects_after_dovecot_is_killed_during_idle_and_idle_works_again(
        dovecot, redis_db, tmp_path):
    env = {**os.environ, **stack.mailbox_env(dovecot, tmp_path)}  # broker: the test Redis db
    logs = tmp_path / "logs"
    logs.mkdir()

    def polls() -> int:
        return redis_db.llen("poll")

    def connections() -> int:
        return watcher.output().count("idle_watching")

    watcher = stack.idle_watcher(env, logs)
    try:
        stack.wait_for(lambda: polls() == 1, 10, "the catch-up poll of the first connection")
        time.sleep(1.0)  # in IDLE now
        proc = psutil.Process(watcher.pid)

        cpu_before, killed = cpu_s(proc), time.monotonic()
        crash(dovecot)
        time.sleep(OUTAGE_S)
        cpu_outage, relaunched = cpu_s(proc) - cpu_before, time.monotonic()
        outage_s = relaunched - killed
        accepting = restart_on_same_port(dovecot)

        stack.wait_for(lambda: connections() >= 2, RECONNECT_WITHIN_S + 5, "the watcher to reconnect",
                       interval=0.02)
        reconnected = time.monotonic()
        stack.wait_for(lambda: polls() == 2, 5, "the catch-up poll after the reconnect", interval=0.02)
        time.sleep(1.5)  # let the reconnected watcher settle in IDLE

        c = dovecot.client()
        try:
            appended = time.monotonic()
            c.append("INBOX", mail("after-the-outage"))
            stack.wait_for(lambda: polls() == 3, 5, "IDLE to trigger a poll for the new mail", interval=0.01)
            latency = time.monotonic() - appended
        finally:
            c.logout()

        out = watcher.output()
        print(f"\noutage {outage_s:.1f}s: watcher CPU {cpu_outage:.3f}s "
              f"({100 * cpu_outage / outage_s:.1f}% of the wall time), "
              f"{out.count('idle_reconnect')} reconnect attempts logged; {cpu_s(proc):.2f}s in its whole life")
        print(f"reconnected {reconnected - relaunched:.2f}s after the relaunch "
              f"({reconnected - accepting:.2f}s after Dovecot accepted a login again)")
        print(f"IDLE latency after the reconnect: APPEND -> poll enqueued in {latency * 1000:.0f} ms")

        assert watcher.alive()
        assert cpu_outage < MAX_CPU_SHARE * outage_s, f"{cpu_outage:.2f}s of CPU over a {outage_s:.1f}s outage"
        assert reconnected - relaunched < RECONNECT_WITHIN_S
        assert latency < IDLE_LATENCY_S
        assert "idle_connection_lost" in out and "reconnected=True" in out
        assert dovecot.password not in out
    finally:
        watcher.stop()
