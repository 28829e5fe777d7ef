"""IMAP IDLE watcher: asks for a poll as soon as the server announces new mail."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from synedre.config import Settings, get_settings
from synedre.ingest.poll import imap
from synedre.log import log
from synedre.mail.registry import Mailbox

# RFC 2177: re-issue IDLE before the server's 30-minute inactivity timeout.
IDLE_RENEW_S = 10 * 60
RECONNECT_MAX_S = 60


def watch(mailbox: Mailbox, trigger: Callable[[str], None], stop: threading.Event,
          settings: Settings | None = None) -> None:
    """Run until `stop` is set; reconnect with bounded backoff on any connection error."""
    settings = settings or get_settings()
    backoff = 1.0
    while not stop.is_set():
        try:
            with imap(mailbox, settings) as client:
                client.select_folder(mailbox.folder, readonly=True)
                trigger(mailbox.id)  # catch up on whatever arrived while we were away
                backoff = 1.0
                log.info("idle_watching", mailbox=mailbox.id)
                while not stop.is_set():
                    client.idle()
                    started = time.monotonic()
                    try:
                        while not stop.is_set() and time.monotonic() - started < IDLE_RENEW_S:
                            responses = client.idle_check(timeout=1)
                            if any(r[1] in (b"EXISTS", b"RECENT") for r in responses
                                   if isinstance(r, tuple) and len(r) > 1):
                                trigger(mailbox.id)
                    finally:
                        client.idle_done()
        except Exception as exc:  # any network/IMAP failure: back off and reconnect
            log.warning("idle_reconnect", mailbox=mailbox.id, error=type(exc).__name__,
                        retry_in_s=backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_S)


def watch_all(boxes: list[Mailbox], trigger: Callable[[str], None], stop: threading.Event) -> None:
    threads = [threading.Thread(target=watch, args=(b, trigger, stop), name=f"idle-{b.id}",
                                daemon=True) for b in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
