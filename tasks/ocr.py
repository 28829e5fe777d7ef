"""Queue `ocr`: Tesseract on clean images, text kept out of the database (SPEC §5)."""
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app

stage = StageCode("synedre.stages.ocr", "synedre.ocr")


@app.task(name="synedre.ocr", bind=True, soft_time_limit=900, time_limit=960, **RETRY)
def ocr(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, stage.run(mid))
