"""Queue `poll` (the ingest workers): a launch waiting for the founder's OK — its request
mailed, or ended at its expiry (synedre/stages/approval.py)."""
from synedre.mail.errors import MailNotSent
from tasks._common import RETRY, StageCode, advance, bind
from tasks.app import app

stage = StageCode("synedre.stages.approval", "synedre.approval")

# A request that could not leave yet (SMTP or IMAP down) is tried again, not left for a day.
DEFER = dict(autoretry_for=(MailNotSent, *RETRY["autoretry_for"]), retry_backoff=5,
             retry_backoff_max=300, max_retries=20)


@app.task(name="synedre.approval", bind=True, soft_time_limit=120, time_limit=150, **DEFER)
def approval(self, message_id: int) -> str:
    mid = bind(self, message_id)
    return advance(mid, stage.run(mid))
