"""The IDLE watcher's dead-connection decision and its reconnect loop, on a fake client."""
from __future__ import annotations

import socket
import threading
import time

import pytest
from imapclient.exceptions import CapabilityError, IMAPClientAbortError, LoginError

from synedre.config import Settings
from synedre.ingest import idle
from synedre.mailboxes import Mailbox

pytestmark = pytest.mark.unit

BOX = Mailbox(id="atlas", imap_host="127.0.0.1", imap_port=1, imap_tls=False, username="atlas",
              password_env="TEST_ATLAS_PASSWORD")


class FakeClient:
    """Answers `idle_check` from a script: "eof" (at once, empty: what imapclient does on
    EOF), "quiet" (empty after the full timeout) or "exists"; quiet once the script ends."""

    def __init__(self, *script: str):
        self.script = list(script)
        self.checks = 0
        self.closed = False

    def idle(self) -> None:
        pass

    def idle_check(self, timeout: float) -> list:
        self.checks += 1
        step = self.script.pop(0) if self.script else "quiet"
        if step == "eof":
            return []
        if step == "exists":
            return [(3, b"EXISTS")]
        time.sleep(timeout)
        return []

    def idle_done(self) -> tuple[bytes, list]:
        return b"Idle terminated", []

    def logout(self) -> None:
        self.closed = True

    def shutdown(self) -> None:
        self.closed = True


class Harness:
    """Runs `idle.watch` in a thread with a scripted connect; records connects and polls."""

    def __init__(self, make_client):
        self.make_client = make_client
        self.connects: list[float] = []
        self.clients: list[FakeClient] = []
        self.polls: list[float] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.settings = Settings()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def connect(self, mailbox: Mailbox, settings: Settings) -> FakeClient:
        self.connects.append(time.monotonic())
        client = self.make_client(len(self.connects))
        self.clients.append(client)
        return client

    def _run(self) -> None:
        try:
            idle.watch(BOX, lambda _box: self.polls.append(time.monotonic()), self.stop,
                       self.settings, connect=self.connect)
        except BaseException as exc:
            self.error = exc

    def run_for(self, seconds: float) -> float:
        """Run, then stop; returns how long the watcher took to end after the stop."""
        self.thread.start()
        time.sleep(seconds)
        self.stop.set()
        t0 = time.monotonic()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the watcher did not end after stop"
        return time.monotonic() - t0


def test_an_empty_answer_well_before_the_timeout_is_a_dead_connection():
    assert idle.is_dead([], waited_s=0.001, timeout_s=1.0)
    assert not idle.is_dead([], waited_s=1.0, timeout_s=1.0)  # a quiet, live connection
    assert not idle.is_dead([(b"OK", b"Still here")], waited_s=0.001, timeout_s=1.0)
    assert idle.is_dead([(b"BYE", b"Server shutting down.")], waited_s=0.001, timeout_s=1.0)


def test_exists_and_recent_are_new_mail_but_keepalive_chatter_is_not():
    assert idle.has_new_mail([(4, b"EXISTS")])
    assert idle.has_new_mail([(b"OK", b"Still here"), (1, b"RECENT")])
    assert not idle.has_new_mail([(b"OK", b"Still here"), (2, b"EXPUNGE")])


def test_network_trouble_is_retried_but_a_refused_login_or_missing_idle_is_not():
    assert idle.is_transient(ConnectionRefusedError())
    assert idle.is_transient(TimeoutError())
    assert idle.is_transient(IMAPClientAbortError("EOF"))
    assert idle.is_transient(idle.ConnectionLost())
    assert idle.is_transient(LoginError("b'[UNAVAILABLE] Temporary authentication failure.'"))
    assert not idle.is_transient(LoginError("b'[AUTHENTICATIONFAILED] Authentication failed.'"))
    assert not idle.is_transient(CapabilityError("no IDLE"))
    assert not idle.is_transient(ValueError("a bug"))


def test_eof_during_idle_reconnects_with_backoff_instead_of_spinning():
    """The measured defect: on EOF idle_check returns [] at once and the loop spun a core."""
    h = Harness(lambda n: FakeClient("eof"))
    cpu0 = time.process_time()
    ended_in = h.run_for(2.0)
    cpu = time.process_time() - cpu0
    # backoff 0.5-1 s then 1-1.5 s: 2 or 3 connections in 2 s, never hundreds
    assert 2 <= len(h.connects) <= 4, h.connects
    assert sum(c.checks for c in h.clients) == len(h.connects)  # one check per connection
    assert all(c.closed for c in h.clients)
    assert len(h.polls) == len(h.connects)  # one catch-up poll per (re)connection
    assert cpu < 0.4, f"{cpu:.2f}s of CPU in 2 s"
    assert ended_in < 1.0 and h.error is None


def test_a_quiet_live_connection_is_kept(monkeypatch):
    monkeypatch.setattr(idle, "IDLE_CHECK_S", 0.1)
    h = Harness(lambda n: FakeClient())
    h.run_for(0.6)
    assert len(h.connects) == 1
    assert 4 <= h.clients[0].checks <= 7  # one wait of IDLE_CHECK_S each
    assert len(h.polls) == 1


def test_exists_during_idle_triggers_a_poll(monkeypatch):
    monkeypatch.setattr(idle, "IDLE_CHECK_S", 0.1)
    h = Harness(lambda n: FakeClient("exists", "quiet", "exists"))
    h.run_for(0.5)
    assert len(h.connects) == 1
    assert len(h.polls) == 3  # the catch-up, then one per EXISTS


def test_server_back_after_an_outage_gets_one_catch_up_poll(monkeypatch):
    monkeypatch.setattr(idle, "RECONNECT_FIRST_S", 0.05)
    monkeypatch.setattr(idle, "RECONNECT_JITTER_S", 0.0)

    def make(n: int) -> FakeClient:
        if n == 1:
            return FakeClient("eof")
        if n <= 4:
            raise ConnectionRefusedError(111, "Connection refused")
        return FakeClient()

    h = Harness(make)
    h.run_for(1.5)
    assert len(h.connects) == 5  # up, down for three tries, up again
    gaps = [b - a for a, b in zip(h.connects, h.connects[1:], strict=False)]
    assert gaps[1] < gaps[2] < gaps[3]  # exponential backoff
    assert len(h.polls) == 2  # one per successful connection
    assert h.polls[1] >= h.connects[4]


def test_loss_of_a_long_lived_connection_reconnects_at_once(monkeypatch):
    monkeypatch.setattr(idle, "IDLE_CHECK_S", 0.1)
    monkeypatch.setattr(idle, "STABLE_S", 0.3)
    h = Harness(lambda n: FakeClient("quiet", "quiet", "quiet", "quiet", "eof") if n == 1 else FakeClient())
    h.run_for(1.0)
    assert len(h.connects) == 2
    assert h.connects[1] - h.connects[0] < 0.6  # 0.4 s connected, no backoff after it


def test_a_refused_login_is_tried_again_after_a_doubling_bounded_backoff():
    """The measured defect: a refused login ended the watcher, and the fleet restarted it
    every 1-2 s. Now the watcher stays up and waits SYNEDRE_MAILBOX_BACKOFF_S, doubled each
    time, never more than SYNEDRE_MAILBOX_BACKOFF_MAX_S."""
    def refuse(n: int) -> FakeClient:
        raise LoginError("b'[AUTHENTICATIONFAILED] Authentication failed.'")

    h = Harness(refuse)
    h.settings = Settings(_env_file=None, mailbox_backoff_s=0.1, mailbox_backoff_max_s=0.4)
    h.run_for(1.6)
    gaps = [round(b - a, 2) for a, b in zip(h.connects, h.connects[1:], strict=False)]
    # 0.1, 0.2, 0.4, then the cap: 0.4 (a slow machine only stretches them)
    assert 4 <= len(h.connects) <= 6, gaps
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and gaps[2] >= 0.4, gaps
    assert all(g < 0.4 + 0.2 for g in gaps[2:]), gaps  # capped
    assert h.error is None and not h.polls


def test_a_login_after_refusals_starts_the_backoff_over(monkeypatch):
    monkeypatch.setattr(idle, "IDLE_CHECK_S", 0.05)

    def make(n: int) -> FakeClient:
        if n in (1, 2, 4):
            raise LoginError("b'[AUTHENTICATIONFAILED] Authentication failed.'")
        return FakeClient("eof") if n == 3 else FakeClient()

    h = Harness(make)
    h.settings = Settings(_env_file=None, mailbox_backoff_s=0.2, mailbox_backoff_max_s=5)
    h.run_for(2.0)
    gaps = [b - a for a, b in zip(h.connects, h.connects[1:], strict=False)]
    assert len(h.connects) == 5, gaps
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4  # refused twice: 0.2 then 0.4
    assert gaps[3] < 0.4  # refused once after a login: back to the first delay, 0.2
    assert h.error is None


def test_the_refusal_delay_doubles_and_stays_under_its_cap():
    s = Settings(_env_file=None, mailbox_backoff_s=5, mailbox_backoff_max_s=300)
    assert [idle.refusal_delay(n, s) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]
    assert idle.is_refused(LoginError("b'[AUTHENTICATIONFAILED] Authentication failed.'"))
    assert not idle.is_refused(LoginError("b'[UNAVAILABLE] Temporary authentication failure.'"))
    assert not idle.is_refused(ConnectionRefusedError())


def test_stop_during_the_refusal_backoff_ends_the_watcher_at_once():
    def refuse(n: int) -> FakeClient:
        raise LoginError("b'[AUTHENTICATIONFAILED] Authentication failed.'")

    h = Harness(refuse)
    h.settings = Settings(_env_file=None, mailbox_backoff_s=30, mailbox_backoff_max_s=60)
    ended_in = h.run_for(0.5)
    assert len(h.connects) == 1 and ended_in < 0.5 and h.error is None


def test_a_server_without_idle_still_ends_the_watcher():
    def no_idle(n: int) -> FakeClient:
        raise CapabilityError("127.0.0.1 does not support IDLE")

    h = Harness(no_idle)
    h.run_for(0.5)
    assert len(h.connects) == 1 and isinstance(h.error, CapabilityError)


def test_stop_during_the_backoff_ends_the_watcher_at_once():
    def refuse(n: int) -> FakeClient:
        raise ConnectionRefusedError(111, "Connection refused")

    h = Harness(refuse)
    ended_in = h.run_for(1.0)  # in the first or second wait (0.5-1 s, 1-1.5 s) by now
    assert ended_in < 0.5 and h.error is None


def test_keepalive_is_enabled_on_the_socket():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        idle.enable_keepalive(s)
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == idle.KEEPALIVE_IDLE_S
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == idle.KEEPALIVE_INTERVAL_S
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == idle.KEEPALIVE_COUNT
