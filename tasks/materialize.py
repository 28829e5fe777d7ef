"""Queue `materialize`: one run, question, negotiation or advice per message (SPEC §7)."""
from synedre.stages import materialize as stage
from tasks._common import RETRY, advance, bind
from tasks.app import app


@app.task(name="synedre.materialize", bind=True, soft_time_limit=120, time_limit=150, **RETRY)
def materialize(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, stage.run(mid))
