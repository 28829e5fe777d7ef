"""Connection pool and the database URL (embedded pgserver when none is configured)."""
from __future__ import annotations

import logging
import os
import pwd
import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from synedre.config import Settings, get_settings
from synedre.db.types import Conn
from synedre.log import log

# The pool tries again to connect (and to check a connection it would hand out) after 1 s,
# then twice as long each time, up to its reconnect_timeout: a worker whose database was down
# 20 s served again 10 s after it was back, 60 s behind a two-minute restart. A refused
# connection costs nothing, so attempts stay about a second apart (psycopg_pool has no setting
# for it: this is its class's own constant).
AttemptWithBackoff.DELAY_BACKOFF = 1.0
CONNECT_FAILURE_LOG_EVERY_S = 30.0


class _ConnectFailures(logging.Filter):
    """The pool's "error connecting" warning once per CONNECT_FAILURE_LOG_EVERY_S in a process:
    an outage is said twice a minute by each worker, not at every attempt."""

    def __init__(self) -> None:
        super().__init__()
        self.last = -CONNECT_FAILURE_LOG_EVERY_S

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("error connecting"):
            return True
        now = time.monotonic()
        if now - self.last < CONNECT_FAILURE_LOG_EVERY_S:
            return False
        self.last = now
        return True


connect_failures = _ConnectFailures()
logging.getLogger("psycopg.pool").addFilter(connect_failures)

_lock = threading.RLock()
_pool: ConnectionPool[Conn] | None = None
_embedded_url: str | None = None


# The embedded server's roles (SPEC §13, least privilege): the fleet connects as the
# application role, migrations as the superuser; both only over the Unix socket, as the
# fleet's own OS user (no role logs in over TCP: migrations/0020_drop_agent_role.sql).
ADMIN_ROLE, APP_ROLE = "postgres", "synedre_app"
EMBEDDED_DB = "postgres"
_SYSTEM_USER = "pgserver"  # pgserver's OS user for the postmaster when we are root
_CONF = "synedre.conf"  # included by postgresql.conf; rewritten at every start
_START_TIMEOUT_S = 60


def database_url(settings: Settings | None = None) -> str:
    """The fleet's URL: the configured one, or the application role on an embedded
    PostgreSQL 16 + pgvector under state_dir (started if needed)."""
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


def admin_url(url: str | None = None, settings: Settings | None = None) -> str:
    """What migrations connect with: for the embedded server (none configured, or `url` is
    its application URL, as the fleet hands its children) its superuser; else `url`, or
    the configured URL, as given (an external server's migrations run as its operator says)."""
    settings = settings or get_settings()
    url = url or database_url(settings)
    where = _embedded_where(settings)
    if where is not None and url == _url(APP_ROLE, *where):
        return _url(ADMIN_ROLE, *where)
    return url


def _url(role: str, socket_dir: Path | str, port: int) -> str:
    return f"postgresql://{role}@/{EMBEDDED_DB}?host={socket_dir}&port={port}"


def _embedded_where(settings: Settings) -> tuple[Path, int] | None:
    """(socket dir, port) of the embedded server of `settings` if it runs as we start it."""
    from pgserver.postgres_server import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(embedded_pgdata(settings))
    except (OSError, AssertionError, ValueError):
        return None
    if info is None or not info.is_running() or info.socket_dir is None or info.port is None:
        return None
    return info.socket_dir, info.port


def embedded_pgdata(settings: Settings | None = None) -> Path:
    return ((settings or get_settings()).state_dir / "pgdata").resolve()


@contextmanager
def _start_lock(pgdata: Path) -> Iterator[None]:
    import fcntl

    with open(pgdata.parent / ".pgdata.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _start_embedded(pgdata: Path) -> str:
    """Start (or adopt) the embedded server, hardened at every start, and return the
    application role's URL (a socket in pgdata, stable across restarts).

    Authentication, rewritten each time (pg_hba.conf, pg_ident.conf): the Unix socket
    admits only the fleet's own OS user (peer, mapped to the superuser and the
    application role). The boundary there is peer authentication, the kernel's word for
    the connecting uid, not file modes: the socket itself is 0777, and although it
    usually sits in pgdata (0700, the postmaster's user's), a pgdata path too long for a
    socket puts it in a runtime directory (made 0777 under root). Every TCP login is
    rejected, for every role and address, password or not (an older release trusted a
    read-only role on loopback; the rewrite here takes that line away on its next
    start). Knowing the coordinates is not enough. pgserver's own start listens on no
    TCP address, so the postmaster is started here with pgserver's binaries; a server
    started otherwise (an older release) is restarted once."""
    cmds, utils = _pgserver()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    root = os.geteuid() == 0
    user = _SYSTEM_USER if root else None
    with _start_lock(pgdata):
        pgdata.mkdir(exist_ok=True)
        if root:  # the postmaster runs as pgserver's user: it must reach pgdata and its binaries
            entry = utils.ensure_user_exists(_SYSTEM_USER)
            assert entry is not None
            os.chown(pgdata, entry.pw_uid, entry.pw_gid)
            _searchable_parents(pgdata)
            utils.ensure_prefix_permissions(cmds.POSTGRES_BIN_PATH)
            utils.ensure_folder_permissions(cmds.POSTGRES_BIN_PATH, 0o055)
            utils.ensure_folder_permissions(cmds.POSTGRES_BIN_PATH.parent / "lib", 0o044)
        if not (pgdata / "PG_VERSION").exists():
            cmds.initdb(["--auth-local=peer", "--auth-host=reject", "--encoding=utf8", "-U", ADMIN_ROLE],
                        pgdata=pgdata, user=user)
        _ensure_postmaster(pgdata, _write_config(pgdata, user), root, user)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            info = utils.PostmasterInfo.read_from_pgdata(pgdata)
            if info is not None and info.is_running() and info.status == "ready" and info.socket_dir:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded PostgreSQL in {pgdata} did not become ready")
            time.sleep(0.1)
        assert info.socket_dir is not None and info.port is not None
        _bootstrap_roles(_url(ADMIN_ROLE, info.socket_dir, info.port))
        return _url(APP_ROLE, info.socket_dir, info.port)


def _pgserver() -> tuple[Any, Any]:
    """pgserver's commands and utilities, imported quietly (platformdirs warns about
    XDG_RUNTIME_DIR)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver import _commands as cmds, utils
    return cmds, utils


def _ensure_postmaster(pgdata: Path, port: int, root: bool, user: str | None) -> None:
    """The postmaster running on the configuration just written: reloaded when it already
    listens as configured, restarted when it listens otherwise, started when it is down
    (on another port if its own was taken meanwhile)."""
    import warnings

    cmds, utils = _pgserver()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.postgres_server import PostgresServer
    info = utils.PostmasterInfo.read_from_pgdata(pgdata)
    if info is not None and info.is_running():
        if info.hostname == "127.0.0.1" and info.port == port:
            cmds.pg_ctl(["reload"], pgdata=pgdata, user=user, timeout=_START_TIMEOUT_S)  # the hba as written
            return
        cmds.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=_START_TIMEOUT_S)
    socket_dir = utils.find_suitable_socket_dir(pgdata, PostgresServer.runtime_path)
    if root and socket_dir != pgdata:
        utils.ensure_prefix_permissions(socket_dir)
        socket_dir.chmod(0o777)
    for attempt in range(2):
        try:
            cmds.pg_ctl(["-w", "-o", f"-k {socket_dir}", "-l", str(pgdata / "log"), "start"],
                        pgdata=pgdata, user=user, timeout=_START_TIMEOUT_S)
            return
        except Exception:
            if attempt or _port_free(port):
                raise
            port = _write_config(pgdata, user, utils.find_suitable_port("127.0.0.1"))  # taken meanwhile


def _searchable_parents(pgdata: Path) -> None:
    """Every directory above pgdata searchable (x) by others, none made listable: the state
    directory itself ends 0711, so the agent's user cannot list it (pgserver's own start
    would make it 0755)."""
    state = pgdata.parent
    state.chmod((state.stat().st_mode & 0o700) | 0o011)
    for parent in state.parents:
        mode = parent.stat().st_mode & 0o7777
        if mode & 0o011 != 0o011:
            parent.chmod(mode | 0o011)


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _write_config(pgdata: Path, user: str | None, port: int | None = None) -> int:
    """pg_hba.conf, pg_ident.conf and our include (loopback TCP, where every login is
    rejected, on a port kept across restarts: the socket's name carries it too); returns
    the port."""
    import re

    conf = pgdata / _CONF
    if port is None:
        old = re.search(r"^port = (\d+)$", conf.read_text(), re.M) if conf.exists() else None
        if old:
            port = int(old.group(1))
        else:
            from pgserver.utils import find_suitable_port

            port = find_suitable_port("127.0.0.1")
    fleet = pwd.getpwuid(os.geteuid()).pw_name
    header = "# Written by synedre at every start of the embedded server: edits here are lost.\n"
    files = {
        _CONF: f"{header}listen_addresses = '127.0.0.1'\nport = {port}\n",
        "pg_hba.conf": header + "".join(f"{line}\n" for line in (
            f"local all {ADMIN_ROLE},{APP_ROLE} peer map=synedre",
            "local all all reject",
            "host all all 0.0.0.0/0 reject",
            "host all all ::/0 reject")),
        "pg_ident.conf": f"{header}synedre {fleet} {ADMIN_ROLE}\nsynedre {fleet} {APP_ROLE}\n",
    }
    main = pgdata / "postgresql.conf"
    include = f"include_if_exists '{_CONF}'"
    if include not in main.read_text():
        files["postgresql.conf"] = main.read_text() + f"\n{include}\n"
    owner = pwd.getpwnam(user) if user else None
    for name, text in files.items():
        path = pgdata / name
        tmp = path.with_name(name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        if owner is not None:
            os.chown(tmp, owner.pw_uid, owner.pw_gid)
        tmp.replace(path)
    return port


def _bootstrap_roles(admin: str) -> None:
    """The application role logs in from the first start (its grants come from migrations)."""
    with psycopg.connect(admin, autocommit=True, connect_timeout=_START_TIMEOUT_S) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_ROLE,)).fetchone():
            conn.execute(f"ALTER ROLE {APP_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        else:
            conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN")


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


# A command run by hand says at once that PostgreSQL refuses it (the CLI sets this): one
# direct connection before the pool, whose first wait would last db_timeout_s. A worker's
# pool waits instead, riding out a restart.
check_before_pool = False


def pool() -> ConnectionPool[Conn]:
    """The process's pool, opened on first use (never inherited across a fork)."""
    global _pool
    with _lock:
        if _pool is None:
            if check_before_pool:
                connect().close()
            s = get_settings()
            _pool = ConnectionPool(
                database_url(s), min_size=1, max_size=s.db_pool_max, timeout=s.db_timeout_s,
                kwargs={"row_factory": dict_row, "connect_timeout": int(s.db_timeout_s)},
                configure=_configure, open=True, name="synedre",
                # a connection handed out is checked first: after a database restart the
                # pool replaces dead ones instead of failing the next stage
                check=check_idle,
            )
        return _pool


def check_idle(conn: Conn) -> None:
    """The pool's check of a connection it hands out, with a round trip only when needed.

    An idle connection's socket is silent: the server writes to it only to end it (a
    restart's or an administrator's FATAL message, then the close) or, rarely, with a
    notice. So the socket is asked first, without waiting: silent, the connection is handed
    out as it is; readable or closed, it gets the full check (an empty query), which raises
    for a dead one, and the pool replaces it. A stage takes a connection for its claim
    and another for its write: the round trip saved on each is a short transaction's
    largest overhead after BEGIN and COMMIT."""
    if not conn.closed and not select.select([conn.fileno()], [], [], 0)[0]:
        return
    ConnectionPool.check_connection(conn)


@contextmanager
def transaction() -> Iterator[Conn]:
    """A connection inside one transaction: committed on success, rolled back on error."""
    with pool().connection() as conn:
        with conn.transaction():
            yield conn


def connect(url: str | None = None) -> Conn:
    """A standalone autocommit connection (migrations, CLI): `url`, else the fleet's."""
    conn = psycopg.connect(url or database_url(), row_factory=dict_row, autocommit=True,
                           connect_timeout=int(get_settings().db_timeout_s))
    conn.execute("SET search_path TO synedre, public")
    return conn


def _forget_pool_in_child() -> None:
    global _pool
    _pool = None  # the parent's sockets are not ours; open a fresh pool lazily


os.register_at_fork(after_in_child=_forget_pool_in_child)
