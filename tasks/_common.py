"""What every stage task shares: which errors are transient, how a result moves a message on,
and the stage code a worker loads only for the queues it consumes."""
import gc
import importlib
from types import ModuleType

import psycopg
import psycopg_pool
import redis
import structlog
from celery.signals import worker_init

from synedre.log import log
from synedre.pipeline import ALERTED, consumer_of
from synedre.runner import Done, Held, Result, Skip


class StageCode:
    """A module of stage code that `tasks` run, loaded by a worker that consumes one of their
    queues as it starts (before its pool forks: every child shares it), else on first use. A
    worker of other queues never loads it: the `classify` worker carries no browser, no DKIM
    and no agent code, and starts that much sooner. Its attributes are the module's."""

    registered: list["StageCode"] = []

    def __init__(self, module: str, *tasks: str):
        self.name, self.tasks = module, tasks
        StageCode.registered.append(self)

    def load(self) -> ModuleType:
        if (module := self.__dict__.get("module")) is None:
            module = self.__dict__["module"] = importlib.import_module(self.name)
        return module

    @property
    def loaded(self) -> bool:
        return "module" in self.__dict__

    def __getattr__(self, attr: str):
        return getattr(self.load(), attr)


@worker_init.connect
def _load_stage_code(sender=None, **_):
    consumed = sender.app.amqp.queues.consume_from if sender is not None else None
    routes = sender.app.conf.task_routes if sender is not None else {}
    for code in StageCode.registered:  # a worker started without -Q consumes every queue
        if consumed is None or any(routes[task]["queue"] in consumed for task in code.tasks):
            code.load()
    # What a prefork pool's children inherit (the app, the stage code) is moved out of the
    # collector's reach: its passes would write to those objects' pages, which each child would
    # then copy. A threads worker loses nothing by it (those objects live as long as it does).
    gc.freeze()


# Worth retrying with backoff; everything else fails once and loudly.
TRANSIENT = (psycopg.OperationalError, psycopg_pool.PoolTimeout, redis.ConnectionError, redis.TimeoutError,
             ConnectionError)
RETRY = dict(autoretry_for=TRANSIENT, retry_backoff=2, retry_backoff_max=60, max_retries=8)


def bind(task, message_id) -> int:
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(message=int(message_id), task=task.name, task_id=task.request.id)
    return int(message_id)


def advance(message_id: int, result: Result) -> str:
    """After a stage: enqueue the stage that consumes the status written, or say (log and
    return) why nothing was done, so a `celery call` on the wrong message is never silent."""
    from tasks.app import enqueue

    match result:
        case Done(status=status):
            nxt = consumer_of(status)
            if nxt is not None:
                enqueue(nxt.name, message_id)
            if status in ALERTED:  # a failure after the launch: the founder is told
                enqueue("alert", message_id)
            if learn := result.detail.get("learn"):  # what the founder said, or an escalation: lessons
                enqueue("learn", learn)
            return str(status)
        case Held(why=why):
            log.info("stage_held", message=message_id, reason=why)
            return why
        case Skip(why=why, moved_on=moved_on):
            log.info("stage_nothing_to_do", message=message_id, reason=why)
            if moved_on:
                # the message moved on but its next task may be lost (a worker killed between its
                # commit and its enqueue): offer the stage it waits for; the claim makes it idempotent
                waiting = _waiting_for(message_id)
                if waiting is not None:
                    enqueue(waiting, message_id)
            return f"nothing to do: {why}"
    raise TypeError(f"not a stage result: {result!r}")


def _waiting_for(message_id: int) -> str | None:
    from synedre import db

    with db.transaction() as conn:
        # a transition of the last seconds has its own enqueue on the way: no duplicate then
        row = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s"
                           " AND status_at < now() - interval '3 seconds'", (message_id,)).fetchone()
    stage = consumer_of(row["status"]) if row else None
    return stage.name if stage else None
