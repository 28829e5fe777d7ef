"""Queue `deploy`: the contract decides the path; the code path is deployed (SPEC §9.1–9.3)."""
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app

stage = StageCode("synedre.stages.deploy", "synedre.deploy")


@app.task(name="synedre.deploy", bind=True, soft_time_limit=1500, time_limit=1560, **RETRY)
def deploy(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, stage.run(mid))
