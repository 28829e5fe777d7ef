"""Queue `spawn`: one headless Claude Code launch per message (SPEC §8)."""
import threading

from celery.signals import worker_ready, worker_shutting_down

from synedre.config import get_settings
from synedre.db import launches
from synedre.log import log
from synedre.spawn import locks, stage, workspace
from tasks._common import RETRY, bind
from tasks.app import app, enqueue

# Set when the worker stops: a running launch kills its agent's group and records why.
_stopping = threading.Event()


@worker_shutting_down.connect
def _stop_launches(**_):
    _stopping.set()


@worker_ready.connect
def _prune_worktrees(sender=None, **_):
    s = get_settings()
    queues = sender.app.amqp.queues.consume_from if sender else {}
    if "spawn" not in (queues or {}):
        return
    from synedre import kv

    try:  # the durable switch is read again at every launch; say at once if it is on
        if reason := locks.spawn_disabled(kv.client(), s.spawn_disabled):
            log.warning("spawn_paused_at_worker_start", reason=reason)
    except locks.LaunchGuardUnavailable as exc:
        log.error("spawn_switch_unreadable", error=str(exc))
    if s.workspace_repo:
        # older than any launch could still be running in it
        pruned = workspace.prune_stale(s.workspace_repo, s.hard_timeout_s + 600)
        log.info("worktrees_pruned", count=len(pruned))


@app.task(name="synedre.spawn", bind=True, time_limit=get_settings().hard_timeout_s + 600,
          max_retries=240, **{k: v for k, v in RETRY.items() if k != "max_retries"})
def spawn(self, message_id: int) -> str | None:
    mid = bind(self, message_id)
    try:
        result = stage.run(mid, stop=_stopping)
    except (stage.NoSlot, locks.LaunchGuardUnavailable) as exc:
        # fail closed and come back: no slot, or Redis cannot say whether one is free
        raise self.retry(exc=exc, countdown=get_settings().spawn_slot_retry_s)
    if result is not None and result.ok:
        enqueue("deploy", mid)
    return result and result.reason


@app.task(name="synedre.spawn_select", soft_time_limit=60, time_limit=90, **RETRY)
def spawn_select() -> int:
    """Beat's safety net: every launchable message gets a spawn task (the claim dedups)."""
    from synedre import db

    with db.transaction() as conn:
        ids = launches.selectable(conn)
    for mid in ids:
        enqueue("spawn", mid)
    return len(ids)


@app.task(name="synedre.lock_watchdog", soft_time_limit=60, time_limit=90, **RETRY)
def lock_watchdog() -> int:
    """Beat, every 15 min: launch locks held over 10 minutes without renewal are alerted."""
    from synedre import kv

    stale = locks.stale_locks(kv.client())
    for lock in stale:
        log.error("spawn_lock_stale", **{k: v for k, v in lock.items() if k != "message_id"},
                  message=lock.get("message_id"))
    return len(stale)
