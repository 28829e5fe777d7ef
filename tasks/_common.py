"""What every stage task shares: which errors are transient, how the next stage is called."""
import psycopg
import redis
import structlog

# Worth retrying with backoff; everything else fails once and loudly.
TRANSIENT = (psycopg.OperationalError, redis.ConnectionError, redis.TimeoutError, ConnectionError)
RETRY = dict(autoretry_for=TRANSIENT, retry_backoff=2, retry_backoff_max=60, max_retries=8)


def bind(task, message_id) -> int:
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(message=int(message_id), task=task.name, task_id=task.request.id)
    return int(message_id)
