"""Queue `qa`: routes re-resolved against the sitemap, then one browser check per route on
any QA worker (`celery -A tasks worker -Q qa` scales them), joined in PostgreSQL (SPEC §9.3)."""
from synedre.orchestrate import qa_stage
from synedre.pipeline import Status
from tasks._common import RETRY, advance, bind
from tasks.app import app, enqueue


@app.task(name="synedre.qa", bind=True, soft_time_limit=300, time_limit=330, **RETRY)
def qa(self, message_id: int) -> str:
    mid = bind(self, message_id)
    result = qa_stage.plan(mid)
    if isinstance(result, str):
        return advance(mid, result)
    status, pending = result
    if status == Status.QA:
        for _ in range(pending):  # one task per route: any QA worker may take any route
            enqueue("qa_route", mid)
        return f"{status}: {pending} route(s) queued"
    return advance(mid, status)


@app.task(name="synedre.qa_route", bind=True, soft_time_limit=600, time_limit=660, **RETRY)
def qa_route(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, qa_stage.check_one(mid))
