"""Queue `recap`: the scheduled reports mailed to the founder (SPEC §12: the monthly calibration)."""
from synedre.log import log
from synedre.mail.errors import MailNotSent
from tasks._common import TRANSIENT, StageCode
from tasks.app import app

calibration = StageCode("synedre.report.calibration", "synedre.report_calibration")


@app.task(name="synedre.report_calibration", bind=True, soft_time_limit=300, time_limit=330,
          autoretry_for=TRANSIENT, retry_backoff=30, retry_backoff_max=1800, max_retries=20)
def report_calibration(self, days: int = 30) -> str:
    """This month's calibration report to the founder; a second run in the month sends nothing."""
    try:
        sent = calibration.mail_monthly(days=days)
    except MailNotSent as exc:
        if not exc.transient:
            raise
        raise self.retry(exc=exc, countdown=min(1800, 60 * 2 ** self.request.retries),
                         max_retries=20) from exc
    log.info("calibration_report_mailed", outcome=str(sent.outcome), rfc_message_id=sent.rfc_message_id)
    return str(sent.outcome)
