"""Connection pool and the database URL (embedded pgserver when none is configured)."""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from synedre.config import Settings, get_settings
from synedre.db.types import Conn
from synedre.log import log

_lock = threading.RLock()
_pool: ConnectionPool[Conn] | None = None
_embedded_url: str | None = None


def database_url(settings: Settings | None = None) -> str:
    """The configured URL, or an embedded PostgreSQL 16 + pgvector under state_dir."""
    global _embedded_url
    settings = settings or get_settings()
    if settings.database_url:
        return settings.database_url
    with _lock:
        if _embedded_url is None:
            import warnings

            with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR
                warnings.simplefilter("ignore")
                import pgserver  # only the embedded default needs it

            pgdata = (settings.state_dir / "pgdata").resolve()
            pgdata.parent.mkdir(parents=True, exist_ok=True)
            # cleanup_mode=None: the server outlives this process, so the fleet, the
            # CLI and `celery call` all share one embedded database.
            fresh = not (pgdata / "PG_VERSION").exists()
            _embedded_url = pgserver.get_server(pgdata, cleanup_mode=None).get_uri()
            if fresh:  # said once, when the database is created, not on every command
                log.info("embedded_database", pgdata=str(pgdata),
                         hint="set SYNEDRE_DATABASE_URL to use an external PostgreSQL with pgvector")
        return _embedded_url


def _configure(conn: Conn) -> None:
    conn.execute("SET search_path TO synedre, public")
    conn.commit()


def pool() -> ConnectionPool[Conn]:
    """The process's pool, opened on first use (never inherited across a fork)."""
    global _pool
    with _lock:
        if _pool is None:
            s = get_settings()
            _pool = ConnectionPool(
                database_url(s), min_size=1, max_size=s.db_pool_max, timeout=s.db_timeout_s,
                kwargs={"row_factory": dict_row, "connect_timeout": int(s.db_timeout_s)},
                configure=_configure, open=True, name="synedre",
            )
        return _pool


@contextmanager
def transaction() -> Iterator[Conn]:
    """A connection inside one transaction: committed on success, rolled back on error."""
    with pool().connection() as conn:
        with conn.transaction():
            yield conn


def connect(url: str | None = None) -> Conn:
    """A standalone autocommit connection (migrations, CLI)."""
    conn = psycopg.connect(url or database_url(), row_factory=dict_row, autocommit=True,
                           connect_timeout=int(get_settings().db_timeout_s))
    conn.execute("SET search_path TO synedre, public")
    return conn


def _forget_pool_in_child() -> None:
    global _pool
    _pool = None  # the parent's sockets are not ours; open a fresh pool lazily


os.register_at_fork(after_in_child=_forget_pool_in_child)
