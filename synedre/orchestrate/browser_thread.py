"""A QA worker's browser thread: its kept Chromium lives in a thread of its own, so that it is
started when QA needs it and closed when QA is idle.

Playwright's sync API binds a browser to the thread that started it, and a Celery prefork
child's main thread sleeps in the pool's loop between tasks: nothing there could close the
browser after a quiet while. The checks of a process that keeps its browser
(`browser.keep_browser`, tasks/qa.py) therefore run here, one at a time, in the thread that
owns it (`run`); once no check came for `IDLE_S`, the thread closes the browser and its driver
(~0.5 GiB), and the next check starts one (~0.7 s). `stop` closes it at the worker's shutdown.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any, TypeVar

from synedre.orchestrate import browser
from synedre.orchestrate.browser import Browser, keep_browser as keep

__all__ = ["IDLE_S", "keep", "run", "stop"]

T = TypeVar("T")
# Long enough for a message's routes and the next message's QA in a busy hour, short enough
# that an agent's run (its CLI ~0.25 GiB) rarely finds a Chromium still open beside it.
IDLE_S = 20.0
_STOP = object()


class _Owner(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="qa-browser", daemon=True)
        self.jobs: queue.SimpleQueue[tuple[Any, Future]] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            try:
                job, done = self.jobs.get(timeout=IDLE_S)
            except queue.Empty:
                browser.close_kept_browser()  # idle: a no-op when it is closed already
                continue
            if job is _STOP:
                browser.close_kept_browser()
                done.set_result(None)
                return
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(job())
                except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                    done.set_exception(exc)


_owner: _Owner | None = None
_lock = threading.Lock()


def run(check: Callable[[Browser | None], T], timeout_s: float) -> T:
    """`check(browser)` in the browser thread, with the process's kept Chromium (launched as
    needed: `BrowserUnavailable` if it cannot be) when the process keeps one; else here, with
    None (the check starts a Chromium of its own)."""
    global _owner
    if not browser.keeping():
        return check(None)
    with _lock:
        if _owner is None or not _owner.is_alive():  # first use, or a forked child's copy
            _owner = _Owner()
            _owner.start()
        owner = _owner
    done: Future[T] = Future()
    owner.jobs.put((lambda: check(browser.kept_browser(timeout_s)), done))
    return done.result()


def stop(timeout_s: float = 30.0) -> None:
    """Close the kept browser in the thread that owns it, and end that thread."""
    global _owner
    with _lock:
        owner, _owner = _owner, None
    if owner is not None and owner.is_alive():
        done: Future[None] = Future()
        owner.jobs.put((_STOP, done))
        try:
            done.result(timeout_s)
        except FutureTimeout:
            pass  # a check still hangs: the process's exit ends the driver and its browser
