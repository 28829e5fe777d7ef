"""Queue `recap`: the founder's recap, and his alerts, through the mail facade (SPEC §9.6)."""
from synedre.config import get_settings
from synedre.mail.errors import RecapDeferred
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app

stage = StageCode("synedre.stages.recap", "synedre.recap", "synedre.alert")
lessons = StageCode("synedre.orchestrate.lessons", "synedre.learn")

DEFER = dict(autoretry_for=(RecapDeferred, *RETRY["autoretry_for"]), retry_backoff=5, retry_backoff_max=300,
             max_retries=20)


@app.task(name="synedre.recap", bind=True, soft_time_limit=300, time_limit=330, **DEFER)
def recap(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, stage.run(mid))


@app.task(name="synedre.alert", bind=True, soft_time_limit=300, time_limit=330, **DEFER)
def alert(self, message_id: int) -> str:
    bind(self, message_id)
    return stage.alert(int(message_id))


# Housekeeping on this queue: what the founder said of a message becomes lessons (SPEC §9.8).
@app.task(name="synedre.learn", bind=True, soft_time_limit=120, time_limit=150, **RETRY)
def learn(self, message_id: int) -> list[str]:
    mid = bind(self, message_id)
    return lessons.learn_message(mid, get_settings())
