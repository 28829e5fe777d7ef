from celery import Celery
from celery.signals import setup_logging, worker_process_init, worker_ready

from synedre import log as logging_setup
from synedre.config import get_settings, unknown_variables
from synedre.log import log
from tasks import _wake  # noqa: F401  # a threads worker's next task at once (its docstring)

app = Celery("synedre")
app.config_from_object("synedre.celeryconfig")


@setup_logging.connect
def _logging(**_):
    s = get_settings()
    logging_setup.configure(s.log_format, s.log_level)
    for line in unknown_variables():  # a misspelt setting would otherwise be ignored in silence
        log.warning("unknown_setting", variable=line)


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


# A worker killed with a task unacknowledged leaves it in kombu's `unacked` hash until the
# visibility timeout (hours): at start, a worker hands back those whose message no live
# execution holds. Stages are idempotent, so a copy of a live task would cost a no-op.
ORPHAN_AFTER_S = 5.0


@worker_ready.connect
def _restore_orphaned_tasks(sender=None, **_):
    import json
    import time

    from synedre import orphans

    try:
        with app.connection_for_write() as conn:
            channel = conn.default_channel
            client = channel.client
            tags = client.zrangebyscore(channel.unacked_index_key, 0, time.time() - ORPHAN_AFTER_S)
            restored = 0
            for tag in tags:
                raw = client.hget(channel.unacked_key, tag)
                if raw is None:
                    continue
                message = json.loads(raw)[0]
                if orphans.is_orphan(message.get("headers") or {}):
                    channel.qos.restore_by_tag(tag, leftmost=True)
                    restored += 1
        if restored:
            log.warning("orphaned_tasks_restored", count=restored)
    except Exception as exc:  # never stop a worker from starting; the sweep is the safety net
        log.warning("orphaned_tasks_restore_failed", error=f"{type(exc).__name__}: {exc}"[:200])
