"""Queue `qa`: routes re-resolved against the sitemap, then one browser check per route on
any QA worker (`celery -A tasks worker -Q qa` scales them), joined in PostgreSQL (SPEC §9.3)."""
from celery.signals import worker_process_init, worker_process_shutdown

from synedre.pipeline import Status
from synedre.runner import Done
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app, enqueue

qa_stage = StageCode("synedre.stages.qa", "synedre.qa", "synedre.qa_route")
browser = StageCode("synedre.orchestrate.browser_thread", "synedre.qa_route")


@app.task(name="synedre.qa", bind=True, soft_time_limit=300, time_limit=330, **RETRY)
def qa(self, message_id: int) -> str:
    mid = bind(self, message_id)
    result, pending = qa_stage.plan(mid)
    if isinstance(result, Done) and result.status == Status.QA:
        for _ in range(pending):  # one task per route: any QA worker may take any route
            enqueue("qa_route", mid)
        return f"{result.status}: {pending} route(s) queued"
    return advance(mid, result)


@app.task(name="synedre.qa_route", bind=True, soft_time_limit=600, time_limit=660, **RETRY)
def qa_route(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, qa_stage.check_one(mid))


@worker_process_init.connect
def _keep_browser(**_):
    if browser.loaded:  # a QA worker's child (its parent loaded the browser's code)
        browser.keep()  # one Chromium per worker child, for route after route, closed when idle


@worker_process_shutdown.connect
def _close_browser(**_):
    if browser.loaded:
        browser.stop()
