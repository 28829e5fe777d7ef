"""The one Celery configuration, loaded by every worker, beat, Flower and the CLI."""
from typing import NamedTuple

from kombu import Queue

from synedre.config import VISIBILITY_TIMEOUT_S, get_settings
from synedre.pipeline import HOUSEKEEPING, STAGES as PIPELINE, WORKER_GROUPS, group_queues, queues


class Group(NamedTuple):
    queues: list[str]
    concurrency: int
    pool: str = "prefork"
    processes: int = 1


# One queue per stage and the worker groups of `synedre fleet`: both from the pipeline table.
STAGES = queues()
GROUPS = {name: Group(group_queues(name), g.concurrency, g.pool, g.processes)
          for name, g in WORKER_GROUPS.items()}

_settings = get_settings()
broker_url = _settings.broker_url
broker_connection_retry_on_startup = True
broker_transport_options = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
result_backend = None
task_ignore_result = True

task_queues = [Queue(name) for name in STAGES]
task_default_queue = "poll"
task_routes = {**{f"synedre.{s.name}": {"queue": s.queue} for s in PIPELINE},
               **{f"synedre.{task}": {"queue": queue} for task, queue in HOUSEKEEPING.items()}}

task_serializer = "json"
accept_content = ["json"]
# Short stages are idempotent: acknowledge only once done, so a killed worker's task
# is redelivered rather than lost; take one message at a time.
task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
worker_hijack_root_logger = False
worker_send_task_events = True
task_send_sent_event = True

imports = ["tasks.poll", "tasks.scan", "tasks.ocr", "tasks.classify", "tasks.materialize", "tasks.sweep", "tasks.spawn",
           "tasks.deploy", "tasks.qa", "tasks.recap", "tasks.report", "tasks.approval", "beat_schedule"]

beat_scheduler = "redbeat.RedBeatScheduler"
redbeat_redis_url = broker_url
redbeat_key_prefix = "synedre:redbeat"
# The lock that makes one beat the scheduler; a second beat waits for it. Beat renews it at
# every tick (at most beat_max_loop_interval apart), so a beat killed without releasing it
# blocks its replacement for this long only (no sweep, no safety-net poll meanwhile).
redbeat_lock_timeout = 30
beat_max_loop_interval = 5
