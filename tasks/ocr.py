"""Queue `ocr`: Tesseract on clean images, text kept out of the database (SPEC §5)."""
from synedre.ocr import stage
from tasks._common import RETRY, bind
from tasks.app import app, enqueue


@app.task(name="synedre.ocr", bind=True, soft_time_limit=900, time_limit=960, **RETRY)
def ocr(self, message_id: int) -> str | None:
    mid = bind(self, message_id)
    if nxt := stage.run(mid):
        enqueue(nxt, mid)
    return nxt
