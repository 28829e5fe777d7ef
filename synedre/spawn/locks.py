"""Launch guards in Redis (SPEC §8, §12b, §13): the per-message lock, the fleet-wide
launch semaphore, the durable kill switch and the stale-lock watchdog.

Every function takes the `redis.Redis` client, so the caller chooses the connection.
They fail closed: a Redis error becomes `LaunchGuardUnavailable`, never "allowed".
Timestamps come from the Redis server's clock (TIME inside the scripts), so holders on
hosts with skewed clocks agree on expiry and on the watchdog's ages; this needs
Redis >= 5 (scripts replicated by effects).
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast

import redis

LOCK_PREFIX = "synedre:spawn:lock:"
PAUSE_KEY = "synedre:spawn:paused"
SLOTS_KEY = "synedre:spawn:slots"
LOCK_TTL_S = 60.0
MAX_CONCURRENT_LAUNCHES = 3
STALE_AFTER_S = 600.0  # the watchdog's "held 10 minutes without renewal"


class LaunchGuardUnavailable(Exception):
    """Redis could not answer, so nobody can prove a launch is allowed: do not launch."""


@contextmanager
def _guarded(what: str) -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        raise LaunchGuardUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc


def _ms(seconds: float) -> str:
    """Milliseconds as a script argument (Redis hands every ARGV to Lua as a string)."""
    return str(max(1, int(seconds * 1000)))


# redis-py types a command's reply as "Awaitable[Any] | Any" for its sync and asyncio
# clients alike; these clients are sync, so the reply is the value itself.
def _get(r: redis.Redis, key: str | bytes) -> bytes | None:
    return cast("bytes | None", r.get(key))


# --- per-message lock ---------------------------------------------------------------

_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) + tonumber(t[2]) / 1e6 "

# The value is the holder's JSON, token included, so one key answers both "who holds
# it" (audit, watchdog) and "is it mine" (renew, release) atomically.
_LOCK_ACQUIRE = _NOW + """
local v = cjson.encode({token=ARGV[1], host=ARGV[2], pid=tonumber(ARGV[3]),
                        acquired_at=now, renewed_at=now})
if redis.call('SET', KEYS[1], v, 'NX', 'PX', ARGV[4]) then return 1 end
return 0"""

_LOCK_OWNED = """
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ok, h = pcall(cjson.decode, v)
if not ok or type(h) ~= 'table' or h.token ~= ARGV[1] then return 0 end
"""

_LOCK_RENEW = _NOW + _LOCK_OWNED + """
h.renewed_at = now
redis.call('SET', KEYS[1], cjson.encode(h), 'PX', ARGV[2])
return 1"""

_LOCK_RELEASE = _LOCK_OWNED + "return redis.call('DEL', KEYS[1])"


class MessageLock:
    """Exclusive right to launch one message, held (renewed) for the whole launch."""

    def __init__(self, r: redis.Redis, message_id: str) -> None:
        self.redis, self.message_id = r, str(message_id)
        self.key = LOCK_PREFIX + self.message_id
        self.token = secrets.token_hex(16)
        self.ttl_s = LOCK_TTL_S

    def acquire(self, ttl_s: float = LOCK_TTL_S) -> bool:
        self.ttl_s = ttl_s
        with _guarded(f"lock {self.key}"):
            return bool(self.redis.eval(_LOCK_ACQUIRE, 1, self.key, self.token,
                                        socket.gethostname(), str(os.getpid()), _ms(ttl_s)))

    def renew(self) -> bool:
        """Extend by ttl_s; False when the lock expired or someone else now holds it."""
        with _guarded(f"renew {self.key}"):
            return bool(self.redis.eval(_LOCK_RENEW, 1, self.key, self.token, _ms(self.ttl_s)))

    def release(self) -> bool:
        """Delete only if still ours: never free a lock that expired and was retaken."""
        with _guarded(f"release {self.key}"):
            return bool(self.redis.eval(_LOCK_RELEASE, 1, self.key, self.token))

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock now (for the `spawn_skipped_lock_held` audit), token removed;
        None = free, {} = held by a value we cannot read (still held)."""
        with _guarded(f"read {self.key}"):
            raw = _get(self.redis, self.key)
        return None if raw is None else _public(raw) or {}


def _public(raw: bytes | str) -> dict[str, Any] | None:
    """A stored JSON object, minus any token (it would let a reader release the lock)."""
    try:
        h = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(h, dict):
        return None
    h.pop("token", None)
    return h


# --- fleet-wide launch semaphore ----------------------------------------------------

_NOW_MS = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "

# Scores are expiry times: a SIGKILLed holder never releases, its entry just ages out.
_SEM_ACQUIRE = _NOW_MS + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1])
   and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1"""

# An expired entry not yet purged is still counted, but it is no longer ours to extend:
# another worker may already have seen the slot as free.
_SEM_RENEW = _NOW_MS + """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then redis.call('ZREM', KEYS[1], ARGV[1]) return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1"""

_SEM_COUNT = _NOW_MS + "return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')"


class LaunchSemaphore:
    """At most `limit` launches at once across every worker on every host (one
    instance = one slot holder)."""

    def __init__(self, r: redis.Redis, name: str = SLOTS_KEY,
                 limit: int = MAX_CONCURRENT_LAUNCHES, ttl_s: float = LOCK_TTL_S) -> None:
        self.redis, self.name, self.limit, self.ttl_s = r, name, limit, ttl_s
        self.token = secrets.token_hex(16)

    def acquire(self) -> bool:
        with _guarded(f"semaphore {self.name}"):
            return bool(self.redis.eval(_SEM_ACQUIRE, 1, self.name, self.token,
                                        str(self.limit), _ms(self.ttl_s)))

    def renew(self) -> bool:
        with _guarded(f"renew semaphore {self.name}"):
            return bool(self.redis.eval(_SEM_RENEW, 1, self.name, self.token, _ms(self.ttl_s)))

    def release(self) -> bool:
        with _guarded(f"release semaphore {self.name}"):
            return bool(self.redis.zrem(self.name, self.token))

    def in_use(self) -> int:
        """Live (unexpired) holders."""
        with _guarded(f"count semaphore {self.name}"):
            return int(cast(int, self.redis.eval(_SEM_COUNT, 1, self.name)))


# --- heartbeat ----------------------------------------------------------------------

class Renewable(Protocol):
    ttl_s: float

    def renew(self) -> bool: ...


class Heartbeat(threading.Thread):
    """Renews a lock or a semaphore slot every ttl/3 while the launch runs. When the
    guard is lost, `lost` is set (and `on_lost` called): the caller must stop the run,
    since another worker may now take the message or the slot.

        with Heartbeat(lock, on_lost=kill_group) as hb: ...   # start right after acquire
    """

    def __init__(self, guard: Renewable, on_lost: Callable[[], None] | None = None,
                 interval_s: float | None = None) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{type(guard).__name__}")
        self.guard, self.on_lost = guard, on_lost
        self.interval_s = interval_s if interval_s is not None else guard.ttl_s / 3
        self.lost = threading.Event()
        self._halt = threading.Event()

    def run(self) -> None:
        # Until this deadline the key is still ours even if Redis stops answering, so a
        # short Redis blip is retried instead of killing a 40-minute launch.
        valid_until = time.monotonic() + self.guard.ttl_s
        while not self._halt.wait(self.interval_s):
            started = time.monotonic()
            try:
                ok = self.guard.renew()
            except LaunchGuardUnavailable:
                if time.monotonic() + self.interval_s < valid_until:
                    continue
                ok = False  # it may expire before the next try: assume it is gone
            except BaseException:
                self._lose()  # a dead heartbeat must not look like a healthy one
                raise
            if not ok:
                self._lose()
                return
            valid_until = started + self.guard.ttl_s

    def _lose(self) -> None:
        self.lost.set()
        if self.on_lost is not None:
            self.on_lost()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join()

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- kill switch --------------------------------------------------------------------

def spawn_disabled(r: redis.Redis, env_disabled: bool) -> str | None:
    """Why launches are disabled, or None. Checked at the start of every launch; the
    Redis flag needs no restart and, unlike `cancel_consumer`, survives worker restarts."""
    if env_disabled:
        return "SYNEDRE_SPAWN_DISABLED is set"
    with _guarded("kill switch"):
        raw = _get(r, PAUSE_KEY)
    if raw is None:
        return None
    try:
        p = json.loads(raw)
        return f"paused by {p['by']} at {p['at']}: {p['reason']}"
    except (ValueError, KeyError, TypeError):
        return "paused (unreadable flag)"  # a flag we cannot read still stops launches


def pause(r: redis.Redis, by: str, reason: str) -> None:
    """Durable (no TTL): only `resume` lifts it."""
    flag = {"by": by, "reason": reason, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    with _guarded("pause"):
        r.set(PAUSE_KEY, json.dumps(flag))


def resume(r: redis.Redis) -> bool:
    """True when a pause was lifted."""
    with _guarded("resume"):
        return bool(r.delete(PAUSE_KEY))


def status(r: redis.Redis) -> dict[str, Any]:
    with _guarded("status"):
        raw = _get(r, PAUSE_KEY)
    flag = _public(raw) if raw is not None else None
    return {"paused": raw is not None, "pause": flag,
            "launches_in_flight": LaunchSemaphore(r).in_use(),
            "limit": MAX_CONCURRENT_LAUNCHES}


# --- watchdog -----------------------------------------------------------------------

def stale_locks(r: redis.Redis, older_than_s: float = STALE_AFTER_S) -> list[dict[str, Any]]:
    """Message locks not renewed for more than `older_than_s`: their heartbeat is gone
    but the key is still there (a long or missing TTL), which blocks the message.
    A lock whose value cannot be read is reported too: nothing proves it is alive."""
    out = []
    with _guarded("watchdog"):
        secs, micros = cast("tuple[int, int]", r.time())
        now = secs + micros / 1e6
        for key in r.scan_iter(match=LOCK_PREFIX + "*", count=200):
            raw, pttl = _get(r, key), cast(int, r.pttl(key))
            if raw is None:
                continue  # released between SCAN and GET
            key = key.decode() if isinstance(key, bytes) else key
            h = _public(raw) or {}
            renewed, acquired = h.get("renewed_at"), h.get("acquired_at")
            unrenewed = now - renewed if isinstance(renewed, (int, float)) else None
            if unrenewed is not None and unrenewed <= older_than_s:
                continue
            out.append({"message_id": key[len(LOCK_PREFIX):], "host": h.get("host"),
                        "pid": h.get("pid"), "unrenewed_s": unrenewed,
                        "held_s": now - acquired if isinstance(acquired, (int, float)) else None,
                        "ttl_s": pttl / 1000 if pttl >= 0 else None})
    return out


# --- one queued spawn task per message ---------------------------------------------

QUEUED_PREFIX = "synedre:spawn:queued:"
QUEUED_TTL_S = 3600  # a marker whose task was lost cannot block the message for long


def mark_queued(r: redis.Redis, message_id: int) -> bool:
    """True when no spawn task is queued for the message yet (and now one may be)."""
    with _guarded("spawn queue marker"):
        return bool(r.set(f"{QUEUED_PREFIX}{message_id}", "1", nx=True, ex=QUEUED_TTL_S))


def clear_queued(r: redis.Redis, message_id: int) -> None:
    """The queued task has started: a later offer may queue another."""
    with _guarded("spawn queue marker"):
        r.delete(f"{QUEUED_PREFIX}{message_id}")
