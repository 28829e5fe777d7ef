"""Queue `classify`: the guarded LLM classification (SPEC §6)."""
from synedre.classify import stage
from synedre.classify.core import LLMUnavailable
from tasks._common import RETRY, bind
from tasks.app import app, enqueue

LLM_RETRIES = 5


@app.task(name="synedre.classify", bind=True, soft_time_limit=300, time_limit=330, **RETRY)
def classify(self, message_id: int) -> str | None:
    mid = bind(self, message_id)
    try:
        nxt = stage.run(mid)
    except LLMUnavailable as exc:
        if self.request.retries >= LLM_RETRIES:
            stage.fail(mid, str(exc))
            return None
        raise self.retry(exc=exc, countdown=min(300, 10 * 2 ** self.request.retries))
    if nxt:
        enqueue(nxt, mid)
    return nxt
