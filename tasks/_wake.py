"""A worker on the threads pool takes its next task as soon as one ends, not up to a second later.

The worker's event loop (kombu's hub) asks Redis for a task (BRPOP) only while the worker
has a free slot (`qos.can_consume()`), and checks that at each turn of the loop. A prefork
child's result comes back through a pipe the loop watches, so a task's end turns the loop at
once; a thread's end (its acknowledgement included) wakes nothing, and the loop sleeps out
its poll, up to a second, before asking for the next task. With every slot busy, a threads
worker took at most about `concurrency` tasks a second whatever they cost (celery issue
6941). Here each task's end writes a byte to a pipe the loop watches: the loop turns, sees
the free slot, and asks for the next task.
"""
from __future__ import annotations

import os
from typing import Any

from celery.concurrency.thread import TaskPool as ThreadPool
from celery.signals import worker_ready


def wake_on_task_end(hub: Any, pool: Any) -> bool:
    """Make `pool`'s task ends wake `hub`; False (nothing done) unless it is a threads pool."""
    if hub is None or not isinstance(pool, ThreadPool) or "on_apply" in vars(pool):
        return False
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def drain(fd: int) -> None:
        try:
            while os.read(fd, 4096):
                pass
        except BlockingIOError:
            pass

    def poke(_future: object) -> None:
        try:
            os.write(write_fd, b"\0")
        except BlockingIOError:  # the pipe is full: the loop has a wake-up waiting already
            pass

    apply = pool.on_apply

    def on_apply(*args: Any, **kwargs: Any) -> Any:
        result = apply(*args, **kwargs)
        result.f.add_done_callback(poke)  # after the task's callback, its acknowledgement included
        return result

    def watch(loop: Any) -> None:
        loop.add_reader(read_fd, drain, read_fd)

    pool.on_apply = on_apply
    # the loop forgets its readers when the consumer restarts (a broker lost and found again)
    # and then asks the pool to register: the pipe is watched again
    pool.register_with_event_loop = watch
    watch(hub)
    return True


@worker_ready.connect
def _wake_threads_worker(sender: Any = None, **_: Any) -> None:
    wake_on_task_end(getattr(sender, "hub", None), getattr(sender, "pool", None))
