"""IMAP IDLE watcher: asks for a poll as soon as the server announces new mail.

A dead connection must be noticed, not waited out: on EOF imapclient's `idle_check`
returns `[]` at once instead of blocking for its timeout, so an empty answer that comes
well before the timeout means the server is gone. The watcher then reconnects with a
bounded exponential backoff and, once back, asks for one poll for whatever arrived while
it was away. TCP keepalive covers the silent case (a host or a NAT that vanished without
closing the connection). A server that ends the session when the OAuth2 access token it
logged in with expires is the same case: the reconnection logs in with a new token.

A refused login (a wrong password, a revoked refresh token) is not retried at that pace:
the watcher stays up and tries again after SYNEDRE_MAILBOX_BACKOFF_S, doubling up to
SYNEDRE_MAILBOX_BACKOFF_MAX_S, one log line per attempt naming the mailbox, the server and
its answer, and reads its registry entry again each time (a corrected entry, a new refresh
token from `synedre mailbox authorize`, are picked up without a restart).
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

from synedre import mailboxes
from synedre.config import Settings, get_settings
from synedre.log import log
from synedre.mailboxes import LoginRefused, Mailbox, RegistryError, server_answer

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
Reload = Callable[[], Mailbox]


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


def is_refused(exc: BaseException) -> bool:
    """The server (or the token endpoint) answered and said no: retried only after the
    mailbox backoff."""
    return isinstance(exc, LoginRefused) or isinstance(exc, LoginError) and "UNAVAILABLE" not in str(exc)


def refusal_delay(attempt: int, settings: Settings) -> float:
    """Before the next try after `attempt` refused logins in a row: the first delay, doubled
    each time, at most the cap."""
    return min(settings.mailbox_backoff_s * 2 ** (attempt - 1), settings.mailbox_backoff_max_s)


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
        mailbox.login(client)
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
             connect: Connect, down_since: list[float | None], refused: list[int]) -> None:
    """Connect and IDLE until `stop` (returns) or the connection is lost.

    A loss after STABLE_S returns too, so the caller starts the backoff over; an
    earlier one raises and lets the retry policy back off further."""
    if stop.is_set():
        return
    client = connect(mailbox, settings)
    refused[0] = 0  # logged in: a later refusal starts the mailbox backoff over
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
          settings: Settings | None = None, connect: Connect = connect, reload: Reload | None = None) -> None:
    """Run until `stop` is set, reconnecting after any network or IMAP failure, and after a
    refused login once the mailbox backoff has passed (`reload` reads the entry again).

    Raises only what retrying cannot fix (a server without IDLE)."""
    settings = settings or get_settings()
    down_since: list[float | None] = [None]
    refused = [0]
    while not stop.is_set():
        try:
            _retrying(mailbox, stop)(_session, mailbox, trigger, stop, settings, connect, down_since, refused)
        except Exception as exc:
            if stop.is_set() and (is_transient(exc) or is_refused(exc)):
                return
            if not is_refused(exc):
                raise
            refused[0] += 1
            delay = refusal_delay(refused[0], settings)
            log.error("idle_login_refused", mailbox=mailbox.id, attempt=refused[0], retry_in_s=delay,
                      detail=str(exc) if isinstance(exc, LoginRefused) else
                      f"mailbox {mailbox.id}: {mailbox.imap_server} refused the login: {server_answer(exc)}")
            if stop.wait(delay):
                return
            mailbox = _reloaded(mailbox, reload)


def _reloaded(mailbox: Mailbox, reload: Reload | None) -> Mailbox:
    """The entry as the registry says now; the one held when the registry cannot be read."""
    if reload is None:
        return mailbox
    try:
        return reload()
    except RegistryError as exc:
        log.error("idle_registry_unreadable", mailbox=mailbox.id, detail=str(exc))
        return mailbox


def watch_all(boxes: list[Mailbox], trigger: Trigger, stop: threading.Event) -> list[str]:
    """Watch every mailbox, one thread each, until `stop` is set or every watcher has ended;
    returns the ids of the mailboxes whose watcher failed for good."""
    failed: list[str] = []

    def run(box: Mailbox) -> None:
        try:
            watch(box, trigger, stop, reload=lambda: mailboxes.get(box.id))
        except Exception as exc:
            log.error("idle_failed", mailbox=box.id, error=type(exc).__name__, detail=str(exc)[:200])
            failed.append(box.id)

    threads = [threading.Thread(target=run, args=(b,), name=f"idle-{b.id}", daemon=True) for b in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed
