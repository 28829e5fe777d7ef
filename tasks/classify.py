"""Queue `classify`: the guarded LLM classification (SPEC §6)."""
from datetime import UTC, datetime, timedelta

from synedre.classify import stage
from synedre.classify.core import LLMUnavailable
from synedre.config import get_settings
from tasks._common import RETRY, advance, bind
from tasks.app import app


def _delay_s(retries: int) -> float:
    return min(300.0, get_settings().llm_retry_base_s * 2 ** retries)


# max_retries is high: the LLM's own budget (llm_retries) ends the retries first.
@app.task(name="synedre.classify", bind=True, soft_time_limit=300, time_limit=330,
          **{**RETRY, "max_retries": 50})
def classify(self, message_id: int) -> str:
    mid = bind(self, message_id)
    n = self.request.retries
    when = datetime.now(UTC) + timedelta(seconds=_delay_s(n))
    try:
        result = stage.run(mid, retry=(n, get_settings().llm_retries, when))
    except LLMUnavailable as exc:
        raise self.retry(exc=exc, countdown=_delay_s(n)) from None
    return advance(mid, result)
