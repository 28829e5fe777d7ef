from celery import Celery
from celery.signals import setup_logging, worker_process_init

from synedre import log as logging_setup
from synedre.config import get_settings
from synedre.log import log

app = Celery("synedre")
app.config_from_object("synedre.celeryconfig")


@setup_logging.connect
def _logging(**_):
    s = get_settings()
    logging_setup.configure(s.log_format, s.log_level)


@worker_process_init.connect
def _child(**_):
    s = get_settings()
    logging_setup.configure(s.log_format, s.log_level)


def enqueue(stage: str, message_id: int) -> bool:
    """Hand a message to a stage by name: the stage's code need not be loaded here.

    A launch is offered at most once at a time: a spawn task already queued for the
    message (beat's selection, the sweep, a resume) is not queued again."""
    if stage == "spawn":
        from synedre import kv
        from synedre.spawn import locks

        if not locks.mark_queued(kv.client(), message_id):
            log.info("spawn_already_queued", message=message_id)
            return False
    app.send_task(f"synedre.{stage}", args=[message_id])
    return True
