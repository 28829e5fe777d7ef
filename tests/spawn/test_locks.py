"""Launch guards against a real Redis (database 4 and up, one per xdist worker, flushed around each test)."""
from __future__ import annotations

import fcntl
import multiprocessing
import os
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from synedre.spawn.locks import (
    LOCK_PREFIX,
    PAUSE_KEY,
    Heartbeat,
    LaunchGuardUnavailable,
    LaunchSemaphore,
    MessageLock,
    pause,
    resume,
    spawn_disabled,
    stale_locks,
    status,
)
from tests.services import stack

# Not the suite's shared test databases (12 and up, one per xdist worker): 4 and up, one per worker.
REDIS_URL = stack.per_worker(os.environ.get("SYNEDRE_LOCKS_TEST_REDIS_URL", "redis://127.0.0.1:6379/4"))

pytestmark = [pytest.mark.timeout(60), pytest.mark.integration]


@pytest.fixture
def r():
    # Two runs of this file at once (e.g. `pytest tests/spawn` in two shells) would flush
    # each other's keys mid-test: take turns on the database, host-wide.
    guard = Path(tempfile.gettempdir()) / f"synedre-test-redis-{REDIS_URL.rsplit('/', 1)[-1]}.lock"
    with guard.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        client = redis.Redis.from_url(REDIS_URL)
        client.flushdb()
        yield client
        client.flushdb()
        client.close()


@pytest.fixture
def down():
    """A client pointed at a port nobody listens on (no retries: redis-py's default
    backoff would spend ~3 s per call saying the same thing)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5, socket_timeout=0.5,
                          retry=Retry(NoBackoff(), 0))
    yield client
    client.close()


def _together(n: int, fn) -> list:
    """Run fn(i) in n threads released at the same instant; re-raise a thread's error."""
    barrier, results = threading.Barrier(n), [None] * n

    def run(i):
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:  # surfaced below: a thread's error must fail the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [x for x in results if isinstance(x, BaseException)]
    if errors:
        raise errors[0]
    return results


# --- message lock -------------------------------------------------------------------

def test_exactly_one_of_20_threads_acquires_the_message_lock(r):
    won = _together(20, lambda i: MessageLock(r, "m-1").acquire())
    assert won.count(True) == 1


def test_only_the_owner_renews_and_releases(r):
    owner, other = MessageLock(r, "m-1"), MessageLock(r, "m-1")
    assert owner.acquire()
    assert not other.acquire()
    assert not other.renew()
    assert not other.release()
    assert r.exists(owner.key)

    holder = other.holder()
    assert holder["host"] == socket.gethostname() and holder["pid"] == os.getpid()
    assert "token" not in holder

    assert owner.renew()
    assert owner.release()
    assert not r.exists(owner.key)
    assert not owner.release()


def test_ttl_expiry_frees_the_lock_and_the_old_owner_cannot_touch_the_new_one(r):
    old, new = MessageLock(r, "m-1"), MessageLock(r, "m-1")
    assert old.acquire(ttl_s=0.3)
    assert not new.acquire()
    time.sleep(0.5)
    assert new.acquire()
    assert not old.renew()
    assert not old.release()
    assert new.holder() is not None


def test_heartbeat_keeps_the_lock_past_its_ttl(r):
    lock = MessageLock(r, "m-1")
    assert lock.acquire(ttl_s=0.5)
    with Heartbeat(lock) as hb:
        time.sleep(1.5)
        assert not hb.lost.is_set()
        assert not MessageLock(r, "m-1").acquire()
    h = lock.holder()
    assert h["renewed_at"] > h["acquired_at"]
    assert lock.release()


@pytest.mark.parametrize("how", ["deleted", "stolen"])
def test_heartbeat_flags_lost_when_the_lock_is_taken_away(r, how):
    lock, called = MessageLock(r, "m-1"), threading.Event()
    assert lock.acquire(ttl_s=0.6)
    with Heartbeat(lock, on_lost=called.set) as hb:
        r.delete(lock.key)
        if how == "stolen":
            assert MessageLock(r, "m-1").acquire()
        assert hb.lost.wait(2)
    assert called.is_set()
    assert (r.exists(lock.key) == 1) == (how == "stolen")  # the thief's lock is untouched


def test_heartbeat_flags_lost_when_redis_stays_down_until_the_ttl(r, down):
    lock = MessageLock(r, "m-1")
    assert lock.acquire(ttl_s=0.6)
    lock.redis = down
    with Heartbeat(lock) as hb:
        assert hb.lost.wait(3)


def test_heartbeat_rides_out_a_redis_blip_shorter_than_the_ttl(r, down):
    lock = MessageLock(r, "m-1")
    assert lock.acquire(ttl_s=1.5)
    with Heartbeat(lock, interval_s=0.2) as hb:
        lock.redis = down
        time.sleep(0.5)
        lock.redis = r
        time.sleep(0.5)
        assert not hb.lost.is_set()
    assert lock.release()


# --- fleet-wide semaphore -----------------------------------------------------------

_MAX_SCRIPT = "local m = tonumber(redis.call('GET', KEYS[1]) or '0') " \
              "if tonumber(ARGV[1]) > m then redis.call('SET', KEYS[1], ARGV[1]) end"


def _hammer(url: str, threads: int, rounds: int) -> None:
    """One 'worker host': `threads` launchers competing for the fleet's slots."""
    client = redis.Redis.from_url(url)
    client.incr("test:ready")
    while int(client.get("test:ready")) < 2:  # start both processes together
        time.sleep(0.01)

    def launcher(_):
        for _ in range(rounds):
            sem = LaunchSemaphore(client, limit=3, ttl_s=30)
            if not sem.acquire():
                time.sleep(random.uniform(0, 0.002))
                continue
            n = client.incr("test:current")
            client.eval(_MAX_SCRIPT, 1, "test:max", n)
            client.incr("test:launches")
            time.sleep(random.uniform(0.001, 0.005))
            client.decr("test:current")
            assert sem.release()

    _together(threads, launcher)


def test_semaphore_never_exceeds_3_with_2_processes_of_20_threads(r):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(REDIS_URL, 20, 40)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(50)
        assert p.exitcode == 0
    assert int(r.get("test:max")) == 3  # reached the cap, never beyond it
    assert int(r.get("test:launches")) > 10
    assert int(r.get("test:current")) == 0
    assert r.zcard("synedre:spawn:slots") == 0


def test_expired_holders_free_their_slots(r):
    killed = [LaunchSemaphore(r, ttl_s=0.3) for _ in range(3)]  # never release: SIGKILLed
    assert all(s.acquire() for s in killed)
    late = LaunchSemaphore(r, ttl_s=0.3)
    assert not late.acquire()
    time.sleep(0.5)
    assert late.acquire()
    assert not killed[0].renew()
    assert LaunchSemaphore(r).in_use() == 1


def test_a_renewed_slot_outlives_its_ttl(r):
    sem = LaunchSemaphore(r, limit=1, ttl_s=0.5)
    assert sem.acquire()
    with Heartbeat(sem) as hb:
        time.sleep(1.2)
        assert not LaunchSemaphore(r, limit=1).acquire()
        assert not hb.lost.is_set()
    assert sem.release()
    assert LaunchSemaphore(r, limit=1).acquire()


# --- kill switch --------------------------------------------------------------------

def test_pause_is_durable_and_seen_by_a_new_client(r):
    pause(r, by="founder", reason="incident 42")
    fresh = redis.Redis.from_url(REDIS_URL)
    try:
        reason = spawn_disabled(fresh, env_disabled=False)
        assert "founder" in reason and "incident 42" in reason
        assert fresh.ttl(PAUSE_KEY) == -1  # no expiry
        st = status(fresh)
        assert st["paused"] and st["pause"]["by"] == "founder"
    finally:
        fresh.close()


def test_resume_clears_the_pause(r):
    pause(r, by="ops", reason="deploy")
    assert resume(r)
    assert spawn_disabled(r, env_disabled=False) is None
    assert not resume(r)
    assert status(r)["paused"] is False


def test_env_flag_wins(r, down):
    assert "SYNEDRE_SPAWN_DISABLED" in spawn_disabled(r, env_disabled=True)
    pause(r, by="ops", reason="deploy")
    assert "SYNEDRE_SPAWN_DISABLED" in spawn_disabled(r, env_disabled=True)
    assert spawn_disabled(down, env_disabled=True)  # disabled needs no Redis to say so


def test_unreadable_pause_flag_still_disables(r):
    r.set(PAUSE_KEY, "not json")
    assert spawn_disabled(r, env_disabled=False)


# --- fail closed --------------------------------------------------------------------

def test_redis_down_raises_launch_guard_unavailable(down):
    with pytest.raises(LaunchGuardUnavailable):
        MessageLock(down, "m-1").acquire()
    with pytest.raises(LaunchGuardUnavailable):
        LaunchSemaphore(down).acquire()
    with pytest.raises(LaunchGuardUnavailable):
        spawn_disabled(down, env_disabled=False)
    with pytest.raises(LaunchGuardUnavailable):
        stale_locks(down)


# --- watchdog -----------------------------------------------------------------------

def test_stale_locks_reports_locks_not_renewed_beyond_the_limit(r):
    assert MessageLock(r, "old").acquire(ttl_s=30)
    renewed = MessageLock(r, "renewed")
    assert renewed.acquire(ttl_s=30)
    time.sleep(1.2)
    assert renewed.renew()
    assert MessageLock(r, "fresh").acquire(ttl_s=30)
    r.set(LOCK_PREFIX + "by-hand", "1")  # no holder info, no TTL: the original defect
    assert MessageLock(r, "by-hand").holder() == {}  # held, holder unknown

    stale = {s["message_id"]: s for s in stale_locks(r, older_than_s=1)}
    assert set(stale) == {"old", "by-hand"}
    old = stale["old"]
    assert old["host"] == socket.gethostname() and old["pid"] == os.getpid()
    assert old["unrenewed_s"] >= 1 and old["held_s"] >= 1 and 0 < old["ttl_s"] <= 30
    assert stale["by-hand"]["unrenewed_s"] is None and stale["by-hand"]["ttl_s"] is None
    assert stale_locks(r, older_than_s=600) == [
        {"message_id": "by-hand", "host": None, "pid": None, "unrenewed_s": None,
         "held_s": None, "ttl_s": None}]
