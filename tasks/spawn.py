"""Queue `spawn`: one headless Claude Code launch per message (SPEC §8)."""
import threading
from datetime import UTC, datetime, timedelta

from celery.signals import worker_ready, worker_shutting_down

from synedre import db, incidents, kv, runner
from synedre.config import get_settings
from synedre.db import launches
from synedre.log import log
from synedre.spawn import locks
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app, enqueue

stage = StageCode("synedre.stages.spawn", "synedre.spawn", "synedre.spawn_resume")
agent = StageCode("synedre.spawn.agent", "synedre.spawn")
workspace = StageCode("synedre.spawn.workspace", "synedre.spawn")
session = StageCode("synedre.spawn.session", "synedre.spawn", "synedre.sweep")

# Set when the worker stops: a running launch kills its agent's group and records why.
_stopping = threading.Event()


@worker_shutting_down.connect
def _stop_launches(**_):
    _stopping.set()


@worker_ready.connect
def _prune_clones(sender=None, **_):
    s = get_settings()
    queues = sender.app.amqp.queues.consume_from if sender else {}
    if "spawn" not in (queues or {}):
        return
    try:  # the durable switch is read again at every launch; say at once if it is on
        if reason := locks.spawn_disabled(kv.client(), s.spawn_disabled):
            log.warning("spawn_paused_at_worker_start", reason=reason)
    except locks.LaunchGuardUnavailable as exc:
        log.error("spawn_switch_unreadable", error=str(exc))
    # older than any launch could still be running in it
    pruned = workspace.prune_stale(agent.clones_root(s, agent.user(s)), s.hard_timeout_s + 600)
    log.info("clones_pruned", count=len(pruned))
    try:  # the session stores no resume can need: on this host's disk, which the sweep may not see
        session.prune(s.state_dir, s.session_retention_h)
    except Exception as exc:  # never stop a worker from starting; the sweep is the safety net
        log.warning("sessions_prune_failed", error=f"{type(exc).__name__}: {exc}"[:200])


@app.task(name="synedre.spawn", bind=True, time_limit=get_settings().hard_timeout_s + 600,
          max_retries=240, **{k: v for k, v in RETRY.items() if k != "max_retries"})
def spawn(self, message_id: int) -> str:
    mid = bind(self, message_id)
    r = kv.client()
    locks.clear_queued(r, mid)  # running now: a later offer may queue another task
    try:
        result = stage.run(mid, stop=_stopping)
    except (stage.NoSlot, locks.LaunchGuardUnavailable) as exc:
        # fail closed and come back: no slot, or Redis cannot say whether one is free
        delay = get_settings().spawn_slot_retry_s
        until = datetime.now(UTC) + timedelta(seconds=delay)
        with db.transaction() as conn:  # the message says why it waits (audited once per reason)
            runner.hold(conn, stage.STAGE, mid, f"held: {exc}; retry {self.request.retries + 1}/{self.max_retries}",
                        "spawn_held", until)
        try:
            if not locks.mark_queued(r, mid):
                return "nothing to do: another spawn task is queued"
        except locks.LaunchGuardUnavailable:
            pass  # Redis is down: the retry below is still this message's only task
        raise self.retry(exc=exc, countdown=delay) from None
    return advance(mid, result)


@app.task(name="synedre.spawn_resume", bind=True, time_limit=get_settings().hard_timeout_s + 600,
          max_retries=240, **{k: v for k, v in RETRY.items() if k != "max_retries"})
def spawn_resume(self, message_id: int, launch_id: int, attempt: int) -> str:
    """`synedre launch resume`: the message's last launch goes on in its session. The attempt
    it resumes fences a redelivered copy of this task out (its claim finds a later attempt)."""
    mid = bind(self, message_id)
    try:
        result = stage.resume(mid, int(launch_id), int(attempt), stop=_stopping)
    except (stage.NoSlot, locks.LaunchGuardUnavailable) as exc:  # as a launch: come back later
        raise self.retry(exc=exc, countdown=get_settings().spawn_slot_retry_s) from None
    return advance(mid, result)


@app.task(name="synedre.spawn_select", soft_time_limit=60, time_limit=90, **RETRY)
def spawn_select() -> int:
    """Beat's safety net: every launchable message gets one spawn task, none while paused."""
    return offer_launches()


def offer_launches() -> int:
    """Enqueue a spawn task for every launchable message that has none queued; nothing
    while launches are paused (the held messages are offered again on resume)."""
    if locks.spawn_disabled(kv.client(), get_settings().spawn_disabled):
        return 0
    with db.transaction() as conn:
        ids = launches.selectable(conn)
    return sum(enqueue("spawn", mid) for mid in ids)


@app.task(name="synedre.lock_watchdog", soft_time_limit=60, time_limit=90, **RETRY)
def lock_watchdog() -> int:
    """Beat, every 15 min: launch locks held over 10 minutes without renewal are alerted."""

    stale = locks.stale_locks(kv.client())
    for lock in stale:
        log.error("spawn_lock_stale", **{k: v for k, v in lock.items() if k != "message_id"},
                  message=lock.get("message_id"))
    if stale:  # escalated into Atlas's inbox, once an hour (SPEC §12)
        incidents.safely(incidents.stale_locks(stale))
    return len(stale)
