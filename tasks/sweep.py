"""The sweep (beat, every few seconds): re-enqueue messages stuck at a stage (SPEC §12)."""
from synedre import incidents, kv, mailboxes
from synedre.config import get_settings
from synedre.log import log
from synedre.orchestrate import lessons
from synedre.pipeline import STAGES
from synedre.spawn import locks, session
from synedre.spawn.locks import MessageLock
from synedre.sweep import (
    broker_epoch_lost,
    fail_lost_launches,
    find_stuck,
    launch_locks_trusted,
    pending_routes,
    waiting_everywhere,
)
from tasks._common import RETRY
from tasks.app import app, enqueue


# Housekeeping, not a stage: it runs on the ingest workers' queue.
@app.task(name="synedre.sweep", soft_time_limit=120, time_limit=150, **RETRY)
def sweep() -> int:
    r = kv.client()
    paused = locks.spawn_disabled(r, get_settings().spawn_disabled)
    # held launches are offered again on resume, not while paused
    stages = tuple(s for s in STAGES if not (paused and s.name == "spawn"))
    stuck = find_stuck(stages)  # expired claims and long waits, always
    overdue = list(stuck)  # not what a broker loss re-offers below: that is not stuck
    if broker_epoch_lost(r):
        # Redis came back empty: every queued task is gone. Offer everything waiting now,
        # and poll every mailbox (mail may have arrived meanwhile).
        stuck += [m for m in waiting_everywhere(tuple(s for s in stages if s.name != "poll")) if m not in stuck]
        for box in _mailboxes():
            app.send_task("synedre.poll", args=[box], expires=get_settings().poll_interval_s)
        log.warning("broker_epoch_lost", requeued=len(stuck))
    for mid, stage in stuck:
        for _ in range(pending_routes(mid) if stage == "qa_route" else 1):
            enqueue(stage, mid)
    incidents.escalate_stuck(overdue)  # re-offered again within the hour: into Atlas's inbox (SPEC §12)
    lost = fail_lost_launches(lambda mid: MessageLock(r, str(mid)).holder() is not None) \
        if launch_locks_trusted(r) else []
    for mid in lost:  # the founder hears of a launch lost with its worker
        enqueue("alert", mid)
    for mid in lessons.overdue():  # what was said and not learnt yet: its task was lost, or it failed
        enqueue("learn", mid)
    _prune_sessions()
    return len(stuck) + len(lost)


def _prune_sessions() -> None:
    """The launches' session stores on this host that no resume can need any more go."""
    s = get_settings()
    try:
        session.prune(s.state_dir, s.session_retention_h)
    except Exception as exc:  # housekeeping: never what stops the sweep
        log.warning("sessions_prune_failed", error=f"{type(exc).__name__}: {exc}"[:200])


def _mailboxes() -> list[str]:
    try:
        return list(mailboxes.load())
    except mailboxes.RegistryError:
        return []
