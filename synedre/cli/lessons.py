"""`synedre lessons`: what the agents learnt from the founder, listed, added by hand, retired."""
from __future__ import annotations

import json
import sys
from typing import Any

import typer

from synedre.cli.common import DEPENDENCY, USAGE, console, fail, listing, need_database
from synedre.config import get_settings

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  invoke_without_command=True,
                  help="What the agents learnt from the founder (his NON, his refusals, escalations).")


@app.callback()
def lessons_list(ctx: typer.Context,
                 client: str | None = typer.Option(None, "--client",
                                                   help="Only this client's (and the global) lessons"),
                 retired: bool = typer.Option(False, "--retired", help="Retired lessons too"),
                 wide: bool = typer.Option(False, "--wide", help="Every column, long text whole (folded)"),
                 as_json: bool = typer.Option(False, "--json", help="Machine-readable, provenance included")) -> None:
    """List the lessons with where each came from and how often it was given to a launch."""
    from synedre import db
    from synedre.db import lessons

    if ctx.invoked_subcommand is not None:
        return
    need_database()
    with db.transaction() as conn:
        rows = lessons.listing(conn, _client_id(conn, client) if client else None, retired=retired)
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    listing([{"id": str(r["id"]), "client": r["client"] or "(all)", "agent": r["agent"] or "(all)",
              "said": str(r["times_said"]), "given": str(r["times_given"]),
              "from": ", ".join(f"{p['kind']} of message {p['message_id']}" if p["message_id"] else p["kind"]
                                for p in r["provenance"]) or "-",
              "lesson": f"{r['title']}: {r['body']}" + (" (retired)" if r["retired_at"] else "")}
             for r in rows], whole=("id", "client", "agent", "said", "given"), wide=wide, wide_only=("agent",),
            empty="no lesson")


def _client_id(conn: Any, codename: str) -> int:
    from synedre.db import directory

    found = directory.client_id(conn, codename)
    if found is None:
        fail(f"no client {codename!r} (`synedre directory show` lists them)", USAGE)
    return found


@app.command("add")
def lessons_add(text: str = typer.Argument(..., help="The lesson, in the words the agent should read"),
                client: str | None = typer.Option(None, "--client", help="For this client's launches"),
                for_all: bool = typer.Option(False, "--global", help="For every client's launches"),
                agent: str | None = typer.Option(None, "--agent", help="Only this agent's (CODENAME)")) -> None:
    """Add a lesson by hand (redacted, embedded, deduplicated like the founder's)."""
    from synedre import db
    from synedre.db import agents, lessons as sql
    from synedre.orchestrate import lessons

    if bool(client) == for_all:
        fail("give --client CODENAME or --global (one of them)", USAGE)
    need_database()
    with db.transaction() as conn:
        client_id = _client_id(conn, client) if client else None
        agent_id = None
        if agent:
            agent_id = agents.agent_id(conn, agent)
            if agent_id is None:
                fail(f"no agent {agent!r} (`synedre agents` lists them)", USAGE)
        source = sql.note_operator(conn, client_id, agent_id, text)
    done = lessons.learn(source, get_settings())
    if not done.startswith("lesson_"):
        with db.transaction() as conn:
            sql.drop_unlearnt(conn, source)
        fail(f"not added: {done}", DEPENDENCY)
    event, lesson_id = done.split()
    said = "said again (it was there already)" if event == "lesson_said_again" else "added"
    console.print(f"lesson {lesson_id}: {said}")


@app.command("retire")
def lessons_retire(lesson_id: int = typer.Argument(..., help="The lesson's id (`synedre lessons` lists them)")) -> None:
    """Retire a lesson: no launch is given it again (it stays listed with --retired)."""
    from synedre import db
    from synedre.db import lessons

    need_database()
    with db.transaction() as conn:
        if not lessons.retire(conn, lesson_id):
            fail(f"no live lesson {lesson_id} (retired already, or no such id)")
    console.print(f"lesson {lesson_id}: retired")
