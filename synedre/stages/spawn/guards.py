"""A launch's guards, around the runner's claim (SPEC §8): the message's Redis lock (a
duplicate, a redelivery, a manual call, a second worker: `spawn_skipped_lock_held`) and a
fleet-wide slot, each renewed by a heartbeat for as long as the launch runs. The claim in
PostgreSQL stays the source of truth: it also counts the launches running there, so the
cap holds after Redis lost its slots while launches ran."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from synedre import db, kv
from synedre.config import Settings
from synedre.db import messages
from synedre.log import log
from synedre.spawn import locks


class NoSlot(Exception):
    """The launches allowed already run fleet-wide: try again later (transient)."""


class LaunchStop(threading.Event):
    """One launch's stop: set by this launch alone (one of its guards lost), and seen set
    while `worker` is (the worker stopping). A lost guard must not set the worker's event:
    it stays set in that process, and every later launch there would be interrupted at once."""

    def __init__(self, worker: threading.Event | None = None) -> None:
        super().__init__()
        self.worker = worker

    def is_set(self) -> bool:
        return super().is_set() or (self.worker is not None and self.worker.is_set())


def paused(s: Settings) -> str | None:
    """Why launches are paused (the kill switches), if they are."""
    return locks.spawn_disabled(kv.client(), s.spawn_disabled)


@contextmanager
def guarded(message_id: int, s: Settings, stop: threading.Event | None) -> Iterator[LaunchStop | None]:
    """The message's lock and a slot, held with their heartbeats: the launch's own stop, set
    when one of them is lost (or the worker stops); None when another worker holds the lock.
    NoSlot when no slot is free."""
    r = kv.client()
    lock = locks.MessageLock(r, str(message_id))
    if not lock.acquire(s.spawn_lock_ttl_s):
        with db.transaction() as conn:
            messages.audit(conn, message_id, "spawn_skipped_lock_held", holder=lock.holder())
        yield None
        return
    slot = locks.LaunchSemaphore(r, limit=s.max_concurrent_launches, ttl_s=s.spawn_lock_ttl_s)
    beats = []
    try:
        if not slot.acquire():
            raise NoSlot(f"{s.max_concurrent_launches} launches already running")
        own = LaunchStop(stop)
        beats = [locks.Heartbeat(g, on_lost=own.set) for g in (lock, slot)]
        for b in beats:
            b.start()
        yield own
    finally:
        for b in beats:
            b.stop()
        for guard in (slot, lock):  # each on its own: one failing must not keep the other
            try:
                guard.release()
            except locks.LaunchGuardUnavailable as exc:
                log.warning("spawn_release_failed", message=message_id, error=str(exc))
