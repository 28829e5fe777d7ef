"""What every command shares: the exit codes, the console, the one error line (`fail`,
`explain`), the database check, who the operator is, and listings that fit the terminal."""
from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from synedre.config import ConfigError, get_settings

OK, FAILED, USAGE, DEPENDENCY = 0, 1, 2, 3
# A terminal's width (or COLUMNS); piped elsewhere, whole lines (rich would assume 80).
PIPE_WIDTH = 400
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH)
err = Console(stderr=True, soft_wrap=True)


class Unavailable(Exception):
    """A dependency the command needs did not answer; the message says which, where and
    what to check."""


def sub_app(help: str | None, **kw: Any) -> typer.Typer:
    # plain help: no type on a flag, the choices of an option listed
    return typer.Typer(no_args_is_help=True, add_completion=False, help=help, rich_markup_mode=None,
                       pretty_exceptions_enable=False, **kw)


def fail(message: str, code: int = FAILED) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(scrub(message))}")
    raise typer.Exit(code)


def scrub(line: str) -> str:
    """The line without any configured secret: a library's message may quote one (libpq a
    URL's password, a key in a request). Settings that do not load have none to hide (their
    ConfigError never quotes a secret nor a URL)."""
    try:
        from synedre import secrets

        return secrets.redactor().redact_text(line)
    except Exception:
        return line


def explain(exc: Exception) -> tuple[int, str]:
    """(exit code, one line) for an error no command handled itself."""
    import psycopg
    import redis
    from kombu.exceptions import OperationalError as BrokerError
    from psycopg_pool import PoolTimeout

    from synedre.spawn.locks import LaunchGuardUnavailable

    first = scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0])
    from synedre.mailboxes import RegistryError

    if isinstance(exc, ConfigError):
        return USAGE, f"configuration: {exc}"
    if isinstance(exc, RegistryError):
        return USAGE, first
    if isinstance(exc, Unavailable):
        return DEPENDENCY, str(exc)
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn
                  | psycopg.errors.InvalidSchemaName):
        return DEPENDENCY, f"the database ({_postgres_where()}) is not migrated ({first}): run `synedre db upgrade`"
    # no connection (no SQLSTATE, class 08, a server shutting down), not a lock timeout
    if isinstance(exc, PoolTimeout) or isinstance(exc, psycopg.OperationalError) and (
            exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))):
        return DEPENDENCY, (f"PostgreSQL ({_postgres_where()}) is not reachable ({_postgres_why(exc)}):"
                            " check that it runs, and SYNEDRE_DATABASE_URL")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | BrokerError | LaunchGuardUnavailable):
        return DEPENDENCY, f"Redis ({_redis_where()}) is not reachable ({first}): start it, or fix SYNEDRE_BROKER_URL"
    return FAILED, f"{type(exc).__name__}: {first} (--verbose shows where)"


def _postgres_where() -> str:
    from psycopg.conninfo import conninfo_to_dict

    from synedre import db

    s = get_settings()
    if not s.database_url:
        return f"embedded, in {db.embedded_pgdata(s)}"
    c = conninfo_to_dict(s.database_url)  # never the user nor the password
    return f"{c.get('host') or 'local socket'}:{c.get('port') or 5432}/{c.get('dbname') or ''}"


def _postgres_why(exc: Exception) -> str:
    """The reason; a pool's timeout says none, so one direct attempt finds it."""
    import psycopg
    from psycopg_pool import PoolTimeout

    from synedre import db

    if isinstance(exc, PoolTimeout):
        try:
            db.connect().close()
        except psycopg.Error as direct:
            exc = direct
    return scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0])


def _redis_where() -> str:
    from urllib.parse import urlsplit

    u = urlsplit(get_settings().broker_url)
    return f"{u.hostname}:{u.port or 6379}{u.path}"


def need_database() -> None:
    """Stop, saying so, where a command would otherwise create an empty embedded database."""
    from synedre.health import missing_database

    if why := missing_database(get_settings()):
        fail(why, DEPENDENCY)


def operator() -> str:
    """Who runs this command, for the audit: the real uid's name as the OS has it, never
    LOGNAME or USER (the caller sets those). Under sudo, root's record names the caller
    too (`root (sudo from alice)`); SUDO_USER is believed only when the real uid is 0,
    since anyone can set it."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no passwd entry (a container's): the number is the truth
        name = f"uid {uid}"
    sudo = os.environ.get("SUDO_USER") if uid == 0 else None
    return f"{name} (sudo from {sudo})" if sudo and sudo != name else name


def listing(rows: Sequence[dict[str, str | Text]], *, whole: Sequence[str], wide: bool,
            wide_only: Sequence[str] = (), empty: str) -> None:
    """A listing that fits the terminal, 80 columns included: the `whole` columns (ids,
    statuses, codenames) are never folded nor cut; longer text is cut with "…" to fit. With
    --wide, the `wide_only` columns too and nothing cut: one table when it fits (as piped),
    else each row's text whole under its line."""
    if not rows:
        console.print(empty)
        return
    wide = wide or console.width >= PIPE_WIDTH
    names = [n for n in rows[0] if wide or n not in wide_only]
    cells = [{n: v if isinstance(v, Text) else Text(v) for n, v in r.items()} for r in rows]
    natural = {n: max(len(n), *(c[n].cell_len for c in cells)) for n in names}
    text = sorted((n for n in names if n not in whole), key=lambda n: natural[n])
    spare = console.width - sum(natural[n] for n in names if n in whole) - 3 * (len(names) - 1)
    if wide and sum(natural[n] for n in text) > spare:
        return _records(cells, [n for n in names if n in whole], [n for n in names if n not in whole], natural)
    widths = {}
    for i, n in enumerate(text):  # the narrowest first, each at most its fair share of what is left
        widths[n] = max(4, min(natural[n], spare // (len(text) - i)))
        spare -= widths[n]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for n in names:
        table.add_column(n, no_wrap=True, overflow="ellipsis", width=widths.get(n), min_width=natural[n]
                         if n in whole else None)
    for c in cells:
        table.add_row(*(c[n] for n in names))
    console.print(table)


def _records(cells: list[dict[str, Text]], line: list[str], text: list[str], natural: dict[str, int]) -> None:
    """--wide in a narrow terminal: each row's whole columns on its line, its text under it."""
    from rich.padding import Padding

    console.print(Text("  ".join(n.ljust(natural[n]) for n in line).rstrip(), style="bold"))
    for c in cells:
        head = Text("  ").join(c[n] + " " * (natural[n] - c[n].cell_len) for n in line)
        head.rstrip()
        console.print(head)
        for n in text:
            if c[n].plain:
                console.print(Padding(Text(f"{n}: ") + c[n], (0, 0, 0, 4)))
