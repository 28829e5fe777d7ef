"""The sweep (beat, every few minutes): re-enqueue messages stuck between stages (SPEC §12)."""
from synedre import kv
from synedre.spawn.locks import MessageLock
from synedre.sweep import fail_lost_launches, find_stuck
from tasks._common import RETRY
from tasks.app import app, enqueue


# Housekeeping, not a stage: it runs on the ingest workers' queue.
@app.task(name="synedre.sweep", soft_time_limit=120, time_limit=150, **RETRY)
def sweep() -> int:
    stuck = find_stuck()
    for mid, stage in stuck:
        enqueue(stage, mid)
    r = kv.client()
    lost = fail_lost_launches(lambda mid: MessageLock(r, str(mid)).holder() is not None)
    return len(stuck) + len(lost)
