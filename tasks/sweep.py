"""The sweep (beat, every few seconds): re-enqueue messages stuck at a stage (SPEC §12)."""
from synedre import kv
from synedre.config import get_settings
from synedre.pipeline import STAGES
from synedre.spawn import locks
from synedre.spawn.locks import MessageLock
from synedre.sweep import fail_lost_launches, find_stuck
from tasks._common import RETRY
from tasks.app import app, enqueue


# Housekeeping, not a stage: it runs on the ingest workers' queue.
@app.task(name="synedre.sweep", soft_time_limit=120, time_limit=150, **RETRY)
def sweep() -> int:
    r = kv.client()
    paused = locks.spawn_disabled(r, get_settings().spawn_disabled)
    # held launches are offered again on resume, not while paused
    stuck = find_stuck(tuple(s for s in STAGES if not (paused and s.name == "spawn")))
    for mid, stage in stuck:
        enqueue(stage, mid)
    lost = fail_lost_launches(lambda mid: MessageLock(r, str(mid)).holder() is not None)
    return len(stuck) + len(lost)
