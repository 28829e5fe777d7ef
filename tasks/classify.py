"""Queue `classify`: the guarded LLM classification (SPEC §6)."""
from datetime import UTC, datetime, timedelta

from synedre.config import get_settings
from synedre.runner import Done, Held
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app, enqueue

stage = StageCode("synedre.stages.classify", "synedre.classify")
core = StageCode("synedre.classify.core", "synedre.classify")


def _delay_s(retries: int) -> float:
    return min(300.0, get_settings().llm_retry_base_s * 2 ** retries)


# max_retries is high: the LLM's own budget (llm_retries) ends the retries first.
@app.task(name="synedre.classify", bind=True, soft_time_limit=300, time_limit=330,
          **{**RETRY, "max_retries": 50})
def classify(self, message_id: int) -> str:
    mid = bind(self, message_id)
    n = self.request.retries
    when = datetime.now(UTC) + timedelta(seconds=_delay_s(n))
    result = stage.run(mid, retry=(n, get_settings().llm_retries, when))
    if isinstance(result, Held) and result.retry:  # the LLM was unreachable: back later, the message waits
        raise self.retry(exc=core.LLMUnavailable(result.why), countdown=_delay_s(n))
    if isinstance(result, Done) and (released := result.detail.get("released")):
        # the founder's OK moved that message back to its gate's stage: spawn, or deploy
        enqueue(result.detail.get("released_to", "spawn"), released)
    return advance(mid, result)
