"""IMAP IDLE watcher: asks for a poll as soon as the server announces new mail.

A dead connection must be noticed, not waited out: on EOF imapclient's `idle_check`
returns `[]` at once instead of blocking for its timeout, so an empty answer that comes
well before the timeout means the server is gone. The watcher then reconnects with a
bounded exponential backoff and, once back, asks for one poll for whatever arrived while
it was away. TCP keepalive covers the silent case (a host or a NAT that vanished without
closing the connection).
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import tenacity
from imapclient import IMAPClient
from imapclient.exceptions import CapabilityError, IMAPClientError, LoginError

from synedre.config import Settings, get_settings
from synedre.log import log
from synedre.mailboxes import Mailbox

# Re-issue IDLE well before RFC 2177's 29-minute server timeout and the ~5-minute idle
# timeout of many NATs and firewalls.
IDLE_RENEW_S = 4 * 60
# Longest single wait on the socket: how soon a set `stop` is noticed.
IDLE_CHECK_S = 1.0
# An empty `idle_check` answer sooner than this share of its timeout is an EOF.
EARLY_SHARE = 0.5
# Reconnect backoff: RECONNECT_FIRST_S, doubling, capped at RECONNECT_MAX_S (plus up to
# RECONNECT_JITTER_S so several mailboxes on one server do not knock in step), so the
# watcher is back within a few seconds of the server's return.
RECONNECT_FIRST_S = 0.5
RECONNECT_MAX_S = 4.0
RECONNECT_JITTER_S = 0.5
# A connection that lived this long was healthy: its loss starts the backoff over.
STABLE_S = 30.0
# TCP keepalive: the first probe after this much silence, then one every interval;
# the connection is declared dead after `count` unanswered probes.
KEEPALIVE_IDLE_S = 30
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_COUNT = 3

Connect = Callable[[Mailbox, Settings], Any]
Trigger = Callable[[str], None]


class ConnectionLost(Exception):
    """The server closed the connection (or it broke) while we were in IDLE."""


# --- decisions ---------------------------------------------------------------------

def is_dead(responses: list, waited_s: float, timeout_s: float) -> bool:
    """An empty answer well before the timeout (the socket was readable at EOF), or the
    server saying BYE (a clean shutdown; the EOF follows)."""
    if not responses:
        return waited_s < timeout_s * EARLY_SHARE
    return any(isinstance(r, tuple) and r[:1] == (b"BYE",) for r in responses)


def has_new_mail(responses: list) -> bool:
    return any(isinstance(r, tuple) and len(r) > 1 and r[1] in (b"EXISTS", b"RECENT")
               for r in responses)


def is_transient(exc: BaseException) -> bool:
    """Network and server trouble is retried; a refused login or a server without IDLE
    would fail the same way every time, so it is not."""
    if isinstance(exc, LoginError):
        # Dovecot (and RFC 5530) say UNAVAILABLE when the auth backend is down for a while.
        return "UNAVAILABLE" in str(exc)
    if isinstance(exc, CapabilityError):
        return False
    return isinstance(exc, ConnectionLost | OSError | IMAPClientError)


# --- I/O ---------------------------------------------------------------------------

def enable_keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
        if hasattr(socket, name):  # Linux has all three; other systems some or none
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def connect(mailbox: Mailbox, settings: Settings) -> IMAPClient:
    """A logged-in client with `mailbox.folder` selected read-only and keepalive on."""
    client = mailbox.client(settings.imap_timeout_s)
    try:
        enable_keepalive(client.socket())
        client.login(mailbox.username, mailbox.password())
        if not client.has_capability("IDLE"):
            raise CapabilityError(f"{mailbox.imap_host} does not support IDLE")
        client.select_folder(mailbox.folder, readonly=True)
    except BaseException:
        _close(client, polite=False)
        raise
    return client


def _close(client: Any, polite: bool) -> None:
    """LOGOUT when the connection still works; otherwise just drop the socket."""
    try:
        if polite:
            client.logout()
        else:
            client.shutdown()
    except (OSError, IMAPClientError):  # already gone: nothing left to tell the server
        pass


def _trigger(trigger: Trigger, mailbox: Mailbox, why: str) -> None:
    try:
        trigger(mailbox.id)
    except Exception as exc:  # whatever the broker raises: beat's poll is the safety net
        log.error("idle_trigger_failed", mailbox=mailbox.id, why=why, error=type(exc).__name__)


def _idle_round(client: Any, mailbox: Mailbox, trigger: Trigger, stop: threading.Event,
                catch_up: bool) -> None:
    """One IDLE command, ended after IDLE_RENEW_S or on `stop`; ConnectionLost on EOF."""
    client.idle()
    if catch_up:
        # Only once IDLE is on, so mail that arrives during the catch-up poll is
        # announced by the server rather than missed.
        _trigger(trigger, mailbox, "connected")
    started = time.monotonic()
    while not stop.is_set() and time.monotonic() - started < IDLE_RENEW_S:
        t0 = time.monotonic()
        responses = client.idle_check(timeout=IDLE_CHECK_S)
        if is_dead(responses, time.monotonic() - t0, IDLE_CHECK_S):
            raise ConnectionLost("server closed the connection during IDLE")
        if has_new_mail(responses):
            _trigger(trigger, mailbox, "exists")
    _text, responses = client.idle_done()
    if has_new_mail(responses):  # arrived between the last check and DONE
        _trigger(trigger, mailbox, "exists")


def _session(mailbox: Mailbox, trigger: Trigger, stop: threading.Event, settings: Settings,
             connect: Connect, down_since: list[float | None]) -> None:
    """Connect and IDLE until `stop` (returns) or the connection is lost.

    A loss after STABLE_S returns too, so the caller starts the backoff over; an
    earlier one raises and lets the retry policy back off further."""
    if stop.is_set():
        return
    client = connect(mailbox, settings)
    connected = time.monotonic()
    since = down_since[0]
    down_since[0] = None
    log.info("idle_watching", mailbox=mailbox.id, reconnected=since is not None,
             down_s=None if since is None else round(connected - since, 2))
    catch_up = True  # one poll per connection: mail may have arrived while we were away
    try:
        while not stop.is_set():
            _idle_round(client, mailbox, trigger, stop, catch_up)
            catch_up = False
    except BaseException as exc:
        _close(client, polite=False)
        lived = time.monotonic() - connected
        down_since[0] = time.monotonic()
        if is_transient(exc):
            log.warning("idle_connection_lost", mailbox=mailbox.id, error=type(exc).__name__,
                        connected_s=round(lived, 2))
            if lived >= STABLE_S:
                return
        raise
    _close(client, polite=True)


def _retrying(mailbox: Mailbox, stop: threading.Event) -> tenacity.Retrying:
    def log_retry(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("idle_reconnect", mailbox=mailbox.id, attempt=state.attempt_number,
                    error=type(exc).__name__, detail=str(exc)[:200],
                    retry_in_s=round(state.upcoming_sleep, 2))

    def sleep(seconds: float) -> None:
        stop.wait(seconds)  # a stop during the backoff ends it at once

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_transient),
        wait=tenacity.wait_exponential(multiplier=RECONNECT_FIRST_S, max=RECONNECT_MAX_S)
        + tenacity.wait_random(0, RECONNECT_JITTER_S),
        stop=lambda _state: stop.is_set(),
        sleep=sleep,
        before_sleep=log_retry,
        reraise=True,
    )


def watch(mailbox: Mailbox, trigger: Trigger, stop: threading.Event,
          settings: Settings | None = None, connect: Connect = connect) -> None:
    """Run until `stop` is set, reconnecting after any network or IMAP failure.

    Raises only what retrying cannot fix (a refused login, a server without IDLE)."""
    settings = settings or get_settings()
    down_since: list[float | None] = [None]
    while not stop.is_set():
        try:
            _retrying(mailbox, stop)(_session, mailbox, trigger, stop, settings, connect, down_since)
        except Exception as exc:
            if stop.is_set() and is_transient(exc):
                return
            raise


def watch_all(boxes: list[Mailbox], trigger: Trigger, stop: threading.Event) -> list[str]:
    """Watch every mailbox, one thread each, until `stop` is set or every watcher has ended;
    returns the ids of the mailboxes whose watcher failed for good."""
    failed: list[str] = []

    def run(box: Mailbox) -> None:
        try:
            watch(box, trigger, stop)
        except Exception as exc:
            log.error("idle_failed", mailbox=box.id, error=type(exc).__name__, detail=str(exc)[:200])
            failed.append(box.id)

    threads = [threading.Thread(target=run, args=(b,), name=f"idle-{b.id}", daemon=True) for b in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed
