"""Queue `poll`: ingest one mailbox (SPEC §3)."""
import psycopg
import psycopg_pool
import structlog
from imapclient.exceptions import IMAPClientError

from synedre import mailboxes
from synedre.pipeline import Status, consumer_of
from tasks._common import StageCode
from tasks.app import app, enqueue

stage = StageCode("synedre.stages.poll", "synedre.poll")

# IMAP and the database may be restarting: retried with bounded backoff, never dropped
TRANSIENT = (OSError, IMAPClientError, ConnectionError, psycopg.OperationalError, psycopg_pool.PoolTimeout)


@app.task(name="synedre.poll", bind=True, autoretry_for=TRANSIENT, retry_backoff=2,
          retry_backoff_max=30, max_retries=10, soft_time_limit=1800, time_limit=1900)
def poll(self, mailbox_id: str = "atlas", followup: bool = False) -> dict:
    structlog.contextvars.bind_contextvars(mailbox=mailbox_id, task_id=self.request.id)
    try:
        box = mailboxes.get(mailbox_id)
    except mailboxes.RegistryError as exc:
        structlog.get_logger().error("poll_unknown_mailbox", error=str(exc))
        return {"mailbox": mailbox_id, "refused": str(exc)}
    first = consumer_of(Status.RECEIVED).name  # type: ignore[union-attr]

    def hand_on(mid: int) -> None:
        enqueue(first, mid)
    if followup and not stage.still_asked(box):
        return {"mailbox": mailbox_id, "skipped": "polled since"}
    try:
        report = stage.run_coalesced(box, hand_on)
    except mailboxes.LoginRefused as exc:
        # No retry fixes it soon: said once, in the result the worker logs (and `poll --wait`
        # prints), and beat polls again.
        return {"mailbox": mailbox_id, "login_refused": str(exc)}
    if report is None:
        if not followup:
            # Its holder polls again for this one (the flag it left), unless it is killed first:
            # then no poll would run before its lock expires and a trigger comes (beat's, a
            # minute later). So once the lock's time is over, this one looks again.
            poll.apply_async((mailbox_id,), {"followup": True}, countdown=stage.lock_left_s(box) + 1)
        return {"mailbox": mailbox_id, "skipped": "another poll holds the lock"}
    return {"mailbox": mailbox_id, "unseen": report.unseen, "inserted": len(report.inserted),
            "duplicates": report.duplicates, "failed_uids": report.failed_uids}
