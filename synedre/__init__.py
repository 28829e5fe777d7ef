"""Synedre: an email becomes executed work, one Celery stage at a time."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
