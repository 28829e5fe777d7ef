"""Queue `materialize`: one run, question, negotiation or advice per message (SPEC §7)."""
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app

stage = StageCode("synedre.stages.materialize", "synedre.materialize")


@app.task(name="synedre.materialize", bind=True, soft_time_limit=120, time_limit=150, **RETRY)
def materialize(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, stage.run(mid))
