"""Connection pool and the database URL (embedded pgserver when none is configured)."""
from __future__ import annotations

import os
import pwd
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
            pgdata = embedded_pgdata(settings)
            fresh = not (pgdata / "PG_VERSION").exists()
            _embedded_url = _start_embedded(pgdata)
            if fresh:  # said once, when the database is created, not on every command
                log.info("embedded_database", pgdata=str(pgdata),
                         hint="set SYNEDRE_DATABASE_URL to use an external PostgreSQL with pgvector")
        return _embedded_url


def embedded_pgdata(settings: Settings | None = None) -> Path:
    return ((settings or get_settings()).state_dir / "pgdata").resolve()


def _start_embedded(pgdata: Path) -> str:
    import warnings

    with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR
        warnings.simplefilter("ignore")
        import pgserver  # only the embedded default needs it
        from pgserver.postgres_server import PostgresServer

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # A fresh handle each time: pgserver caches one per directory, which would not notice
    # that its postmaster died. cleanup_mode=None: the server outlives this process, so the
    # fleet, the CLI and `celery call` all share one embedded database.
    PostgresServer._instances.pop(pgdata, None)
    return pgserver.get_server(pgdata, cleanup_mode=None).get_uri()


def embedded_running(settings: Settings | None = None) -> bool:
    from pgserver.postgres_server import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(embedded_pgdata(settings))
    return info is not None and info.is_running()


def ensure_embedded(settings: Settings | None = None) -> bool:
    """Start the embedded server if it is not running (the fleet's watchdog); True if it
    had to be (re)started. Its URL (a socket in pgdata) does not change."""
    if embedded_running(settings):
        return False
    _start_embedded(embedded_pgdata(settings))
    return True


def stop_embedded(settings: Settings | None = None) -> bool:
    """Stop the embedded server (fast shutdown); False if it was not running."""
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]  # made at import time

    if not embedded_running(settings):
        return False
    pgdata = embedded_pgdata(settings)
    owner = pwd.getpwuid(pgdata.stat().st_uid).pw_name  # pgserver runs it as its own user under root
    user = {"user": owner} if os.geteuid() == 0 and owner != "root" else {}
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, timeout=60, **user)
    return True


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
                # a connection handed out is checked first: after a database restart the
                # pool replaces dead ones instead of failing the next stage
                check=ConnectionPool.check_connection,
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
