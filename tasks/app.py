from celery import Celery
from celery.signals import setup_logging, worker_process_init

from synedre import log as logging_setup
from synedre.config import get_settings

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


def enqueue(stage: str, message_id: int) -> None:
    """Hand a message to a stage by name: the stage's code need not be loaded here."""
    app.send_task(f"synedre.{stage}", args=[message_id])
