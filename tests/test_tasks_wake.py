"""A threads worker's event loop wakes when a task ends (tasks/_wake.py), so it asks the
broker for the next task at once instead of after its poll's timeout."""
import time

import pytest
from celery.concurrency.solo import TaskPool as SoloPool
from celery.concurrency.thread import TaskPool as ThreadPool
from kombu.asynchronous import Hub

from tasks._wake import wake_on_task_end

POLL_S = 2.0  # far above a task's end: the loop would otherwise sleep this out


@pytest.fixture
def loop():
    """A worker's event loop and a one-thread pool, both stopped after the test."""
    hub, pool = Hub(), ThreadPool(limit=1)
    yield hub, pool
    pool.on_stop()
    hub.close()


def _one_task(pool: ThreadPool) -> list[str]:
    done: list[str] = []
    pool.apply_async(lambda: time.sleep(0.05), callback=lambda _: done.append("acked"))
    return done


def _poll(hub: Hub, timeout: float) -> tuple[float, list]:
    t0 = time.monotonic()
    events = hub.poller.poll(timeout) or []
    return time.monotonic() - t0, events


def test_a_threads_task_end_wakes_the_loop_after_its_callback(loop):
    hub, pool = loop
    assert wake_on_task_end(hub, pool)
    done = _one_task(pool)
    took, events = _poll(hub, POLL_S)
    assert took < 1.0 and events, "the loop slept out its poll after the task ended"
    assert done == ["acked"]  # woken once the task's callback (its acknowledgement) ran
    (fd, _), = events
    callback, args = hub.readers[fd]
    callback(*args)  # the loop drains the pipe: no spurious wake-up afterwards
    assert _poll(hub, 0.05)[1] == []


def test_without_it_a_threads_task_end_wakes_nothing(loop):
    hub, pool = loop
    hub.add_reader(*_idle_pipe())  # a loop watching something, as a worker's watches Redis
    _one_task(pool)
    assert _poll(hub, 0.3)[1] == []


def test_the_loop_restarted_watches_the_pipe_again_and_other_pools_are_left_alone(loop):
    hub, pool = loop
    assert wake_on_task_end(hub, pool)
    assert not wake_on_task_end(hub, pool)  # once per pool: one wake-up per task end
    hub.reset()  # as the consumer's loop does when it restarts
    hub.add_reader(*_idle_pipe())
    pool.register_with_event_loop(hub)  # what the restarted loop asks of the pool
    _one_task(pool)
    took, events = _poll(hub, POLL_S)
    assert took < 1.0 and events
    assert not wake_on_task_end(Hub(), SoloPool(limit=1))


def _idle_pipe():
    import os

    read_fd, _write_fd = os.pipe()
    return read_fd, lambda: None
