"""Queue `scan`: clamd verdicts for every attachment (SPEC §4)."""
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app

stage = StageCode("synedre.stages.scan", "synedre.scan")


@app.task(name="synedre.scan", bind=True, soft_time_limit=600, time_limit=660, **RETRY)
def scan(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, stage.run(mid))
