"""Queue `scan`: clamd verdicts for every attachment (SPEC §4)."""
from synedre.scan import stage
from tasks._common import RETRY, bind
from tasks.app import app, enqueue


@app.task(name="synedre.scan", bind=True, soft_time_limit=600, time_limit=660, **RETRY)
def scan(self, message_id: int) -> str | None:
    mid = bind(self, message_id)
    if nxt := stage.run(mid):
        enqueue(nxt, mid)
    return nxt
