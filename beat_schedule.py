"""What runs on a clock. Read by `celery beat` through tasks.app (see synedre.celeryconfig)."""
from celery.schedules import crontab

from synedre import mailboxes
from synedre.config import get_settings
from tasks.app import app

REPORT_CRONTAB = crontab(minute=0, hour=6, day_of_month=1)


def schedule() -> dict:
    s = get_settings()
    entries = {}
    try:
        boxes = mailboxes.load()
    except mailboxes.RegistryError:
        boxes = {}
    for box in boxes:
        # The safety net behind IDLE. `expires`: polls queued during an outage are
        # dropped instead of piling up (the poll tolerates running twice anyway).
        entries[f"poll-{box}"] = {
            "task": "synedre.poll", "schedule": s.poll_interval_s, "args": [box],
            "options": {"expires": s.poll_interval_s - 5},
        }
    entries["spawn-select"] = {"task": "synedre.spawn_select", "schedule": 60.0, "options": {"expires": 55}}
    entries["lock-watchdog"] = {"task": "synedre.lock_watchdog", "schedule": 15 * 60.0,
                                "options": {"expires": 15 * 60.0}}
    entries["sweep"] = {"task": "synedre.sweep", "schedule": s.sweep_every_s,
                        "options": {"expires": s.sweep_every_s}}
    # The calibration report, mailed to the founder on the 1st of each month (06:00 UTC);
    # the task mails it once per month even if it runs again.
    entries["calibration-report"] = {"task": "synedre.report_calibration", "schedule": REPORT_CRONTAB}
    return entries


app.conf.beat_schedule = schedule()
