"""Operate the Synedre fleet (an email in, executed work out): run it, see its status,
inspect and retry messages, pause launches.

Exit codes: 0 done; 1 the operation failed or was refused; 2 a usage or configuration
error; 3 a dependency is down or not ready (PostgreSQL, Redis, clamd, IMAP, a database
not created or not migrated). Errors are one line; --verbose adds the traceback."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from synedre import log as logging_setup
from synedre.cli import (
    agents,
    approvals,
    database,
    directory,
    fleet,
    launches,
    lessons,
    mailbox,
    messages,
    report,
    status,
    try_,
)
from synedre.cli.common import FAILED, err, explain, fail, sub_app
from synedre.config import get_settings, unknown_variables


class _OneErrorPath(TyperGroup):
    """Whatever a command raises ends here: one line on stderr and its exit code
    (`explain`); the traceback too with --verbose."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort):  # usage errors, exits: typer's own
            raise
        except Exception as exc:
            if ctx.params.get("verbose"):
                err.print_exception()
            try:
                code, line = explain(exc)
            except Exception:  # the error path itself must not end in a traceback
                code, line = FAILED, f"{type(exc).__name__} (--verbose shows where)"
            fail(line, code)


app = sub_app(__doc__, cls=_OneErrorPath)


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v",
                                       help="Log at DEBUG, here and in every process this command starts;"
                                            " an error shows its traceback")) -> None:
    if verbose:  # through the environment, so the fleet's children log at DEBUG too
        os.environ["SYNEDRE_LOG_LEVEL"] = "DEBUG"
        get_settings.cache_clear()
    s = get_settings()
    logging_setup.configure(s.log_format, s.log_level)
    for line in unknown_variables():  # a misspelt setting would otherwise be ignored in silence
        err.print(f"[bold yellow]warning:[/] {escape(line)}")
    if not verbose:  # the pool's retries would repeat, line after line, the error said once at the end
        import logging

        logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    from synedre import db

    db.check_before_pool = True  # a database that refuses is said at once, not after the pool's wait


# Every command and group by its name, in the order `synedre --help` lists them.
COMMANDS: dict[str, Callable[..., None]] = {
    "inspect": messages.inspect, "retry": messages.retry, "approvals": approvals.approvals,
    "approve": approvals.approve, "refuse": approvals.refuse, "status": status.status, "locks": launches.locks,
    "launches": launches.list_launches, "tail": launches.tail, "poll": mailbox.poll, "idle": mailbox.idle,
    "flower": fleet.flower, "metrics": fleet.metrics, "fleet": fleet.fleet, "agents": agents.agents_roster}
GROUPS = {"db": database.app, "directory": directory.app, "report": report.app, "spawn": launches.spawn_app,
          "launch": launches.launch_app, "mailbox": mailbox.app, "try": try_.app, "lessons": lessons.app,
          "agent": agents.agent_app}
for name, command in COMMANDS.items():
    app.command(name)(command)
for name, group in GROUPS.items():
    app.add_typer(group, name=name)


def main() -> None:
    app()
