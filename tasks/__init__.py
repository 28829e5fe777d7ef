"""Celery tasks, one module per queue; `celery -A tasks ...` finds the app here."""
from tasks.app import app

__all__ = ["app"]
