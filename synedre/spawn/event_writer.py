"""The launch's persistence thread: typed events handed to `on_events` in batches, so a slow
database never stalls the pty reader (`EventWriter`)."""
from __future__ import annotations

import gc
import queue
import threading
import time
from collections.abc import Callable

from synedre.log import log
from synedre.spawn.reassembly import Batch

WRITER_SLOW_S = 30.0  # a writer still busy after the run is logged this often, never abandoned
WRITE_ATTEMPTS, WRITE_BACKOFF_S = 3, 1.0  # a batch whose write failed is tried again, then the launch ends
QUEUE_BATCHES = 4


class EventWriter:
    """Calls `on_events` from its own thread so persistence never stalls the pty reader.

    Policy: the reader never waits. `add` appends to a pending batch and offers it to a
    bounded queue without blocking; while the queue is full (the callback is slow), the
    batch keeps growing and goes at a later offer, and the writer merges whatever is
    queued into one call: a slow database gets fewer, bigger writes, not a stalled agent.
    The only cost is memory, bounded by the stream itself. Batches keep stream order
    (one writer thread), so a pair's position across all calls is its sequence number.
    No event is dropped: `close` waits for the writer however slow the database is
    (saying so every WRITER_SLOW_S), and a failed write is tried again. A callback that
    still fails stops further calls; `run` sees `error` and ends the launch, and what was
    not stored is counted in the log (the launch's NDJSON file holds every event).

    The collector: a full collection scans every container the process holds, and it runs
    in whichever thread allocates, mostly the reader: with a worker's modules alone (some
    50,000 objects) it stalled a read for 40-100 ms, and a backlog of decoded events adds
    dozens of objects each. So what exists when the writer starts, and again whenever `add`
    finds the queue full (a backlog is building), is moved out of the collector's sight
    (`gc.freeze`, a constant-time list splice); `close` gives it all back (`gc.unfreeze`).
    Objects are still freed as ever when their last reference goes: only a cycle among
    objects frozen while they were alive waits for `close` to be collected. A process that
    froze itself already (a Celery worker freezes what its pool's children inherit, tasks/
    _common.py) is left as it is: `gc.unfreeze` would give the collector back its modules in
    every child, and what a launch froze without it would never be scanned again.
    """

    def __init__(self, on_events: Callable[[Batch], None]):
        self._on_events = on_events
        self._queue: queue.Queue[Batch | None] = queue.Queue(QUEUE_BATCHES)
        self._pending: Batch = []
        self.error: BaseException | None = None
        self.unsaved = 0
        self._thread = threading.Thread(target=self._loop, name="spawn-events", daemon=True)
        self._freezes = gc.get_freeze_count() == 0  # the freeze, if any, is this writer's to undo
        if self._freezes:
            gc.freeze()
        self._thread.start()

    def add(self, pairs: Batch) -> None:
        self._pending.extend(pairs)
        if self._pending:
            try:
                self._queue.put_nowait(self._pending)
                self._pending = []
            except queue.Full:
                if self._freezes:
                    gc.freeze()  # a backlog is building: out of the collector's sight too

    def close(self) -> None:
        # The process is gone: waiting for the writer no longer stalls anything. The queue may
        # be full behind a slow database: handing it the rest waits as long, and says so too.
        waited = 0.0
        for last in ([self._pending] if self._pending else []) + [None]:
            while True:
                try:
                    self._queue.put(last, timeout=WRITER_SLOW_S)
                    break
                except queue.Full:
                    waited += WRITER_SLOW_S
                    log.warning("spawn_events_writer_slow", waited_s=waited)
        self._pending = []
        while self._thread.is_alive():
            self._thread.join(WRITER_SLOW_S)
            if self._thread.is_alive():
                waited += WRITER_SLOW_S
                log.warning("spawn_events_writer_slow", waited_s=waited)
        if self._freezes:
            gc.unfreeze()
        if self.unsaved:
            log.error("spawn_events_unsaved", events=self.unsaved, error=type(self.error).__name__)

    def _loop(self) -> None:
        done = False
        while not done:
            batch = self._queue.get()
            if batch is None:
                return
            while True:  # merge what piled up while the previous call ran
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    done = True
                    break
                batch = batch + more
            self._write(batch)

    def _write(self, batch: Batch) -> None:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            if self.error is not None:
                break
            try:
                self._on_events(batch)
                return
            except Exception as exc:  # noqa: BLE001 - handed to `run`, which ends the launch
                if attempt == WRITE_ATTEMPTS:
                    self.error = exc
                else:
                    log.warning("spawn_events_write_retry", attempt=attempt, error=type(exc).__name__)
                    time.sleep(WRITE_BACKOFF_S * attempt)
        self.unsaved += len(batch)
