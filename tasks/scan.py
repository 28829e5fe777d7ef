"""Queue `scan`: clamd verdicts for every attachment (SPEC §4)."""
from synedre.stages import scan as stage
from tasks._common import RETRY, advance, bind
from tasks.app import app


@app.task(name="synedre.scan", bind=True, soft_time_limit=600, time_limit=660, **RETRY)
def scan(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, stage.run(mid))
