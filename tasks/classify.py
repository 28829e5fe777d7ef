"""Queue `classify`: the guarded LLM classification (SPEC §6)."""
from datetime import datetime, timedelta, timezone

from synedre.classify import stage
from synedre.classify.core import LLMUnavailable
from tasks._common import RETRY, advance, bind
from tasks.app import app

LLM_RETRIES = 5  # then classify_failed; the delays below add up to about 5 minutes


def _delay_s(retries: int) -> int:
    return min(300, 10 * 2 ** retries)


@app.task(name="synedre.classify", bind=True, soft_time_limit=300, time_limit=330, **RETRY)
def classify(self, message_id: int) -> str:
    mid = bind(self, message_id)
    n = self.request.retries
    when = datetime.now(timezone.utc) + timedelta(seconds=_delay_s(n))
    try:
        result = stage.run(mid, retry=(n, LLM_RETRIES, when))
    except LLMUnavailable as exc:
        raise self.retry(exc=exc, countdown=_delay_s(n)) from None
    return advance(mid, result)
