"""Loaded into the benchmark's workers (`celery worker -I _pool_probe`): once ready, each
worker process writes the size of the database pool it got, so the benchmark prints
what the process really has rather than what it meant to configure."""
import os

from celery.signals import worker_ready

MARK = "bench_pool_probe"


@worker_ready.connect
def _say_pool_size(**_) -> None:
    from synedre import db

    # straight to the log file: Celery may have redirected sys.stdout to a logger
    os.write(1, f"{MARK} pid={os.getpid()} max_size={db.pool().max_size}\n".encode())
