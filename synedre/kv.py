"""Redis: the broker's server also holds locks and flags (never evicted: noeviction)."""
from __future__ import annotations

from functools import lru_cache

import redis

from synedre.config import get_settings


@lru_cache
def client() -> redis.Redis:
    return redis.Redis.from_url(get_settings().broker_url, socket_timeout=5,
                                socket_connect_timeout=5, health_check_interval=30)
