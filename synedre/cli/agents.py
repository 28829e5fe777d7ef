"""`synedre agents` (the roster) and `synedre agent ask` (one persona, one question)."""
from __future__ import annotations

import json
import sys
from typing import Literal

import typer
from rich.markup import escape
from rich.text import Text

from synedre.cli.common import FAILED, USAGE, console, err, fail, listing, need_database, sub_app

agent_app = sub_app("One agent answers one question, outside any launch.")


def agents_roster(family: str | None = typer.Option(None, "--family", help="Only this family (group_name)"),
                  domain: str | None = typer.Option(None, "--domain",
                                                    help="Only agents configured for this prompt domain"),
                  as_json: bool = typer.Option(False, "--json", help="Machine-readable output"),
                  wide: bool = typer.Option(False, "--wide", help="Long text whole (folded)"),
                  check: bool = typer.Option(False, "--check",
                                             help="Report stored orbits that disagree with the family's ring;"
                                                  " exit 1 if any")) -> None:
    """The agent roster: stored orbit and display ring side by side, prompt-domain routing."""
    from synedre import agents as roster_mod, db

    need_database()
    try:
        with db.transaction() as conn:
            rows = roster_mod.roster(conn, family=family, domain=domain)
            routed = roster_mod.route_domain(conn, domain) if domain else None
    except roster_mod.RosterError as exc:
        fail(str(exc), USAGE)
    if check:
        rows = roster_mod.disagreements(rows)
    records = [{**a.as_record(), **({"routed": a == routed} if domain else {})} for a in rows]
    if as_json:
        sys.stdout.write(json.dumps(records, ensure_ascii=False, indent=1) + "\n")
    elif check and not rows:
        console.print("every stored orbit agrees with its family's ring")
    else:
        listing([{"codename": a.codename, "nickname": a.nickname, "family": a.family,
                  "orbite": Text(str(a.orbite)) if a.orbit_agrees else Text(f"{a.orbite} (ring {a.ring})", "bold red"),
                  "ring": str(a.ring), "active": "yes" if a.active else "no", "role": a.role,
                  "domains": ", ".join(a.prompt_domains)} for a in rows],
                whole=("codename", "family", "orbite", "ring", "active"), wide=wide, empty="no agent")
        if domain:
            console.print(f"domain {domain} -> {routed.codename} ({escape(routed.nickname)})" if routed
                          else f"domain {domain} -> no active agent")
    if check and rows:
        err.print(f"{len(rows)} agent(s) whose stored orbit disagrees with their family's ring: "
                  + ", ".join(a.codename for a in rows))
        raise typer.Exit(FAILED)


@agent_app.command("ask")
def agent_ask(codename: str = typer.Argument(..., help="The agent's codename (`synedre agents` lists them)"),
              question: str = typer.Argument(..., help="The question, in quotes"),
              via: Literal["facade", "claude"] = typer.Option(
                  "facade", "--via", help="facade: the AI facade; claude: a short `claude -p`"),
              as_json: bool = typer.Option(False, "--json", help="The answer with its journal row")) -> None:
    """One persona answers one question, journalled with its cost (shown by `synedre launches --asks`)."""
    from synedre import agents as roster_mod, db
    from synedre.db import agents

    need_database()
    with db.transaction() as conn:  # an unknown name costs nothing: refused before any embedding
        known = agents.agent_id(conn, codename, active=True)
    if known is None:
        fail(f"no active agent {codename!r} (`synedre agents` lists them)", USAGE)
    try:
        result = roster_mod.ask(codename, question, via=via)
    except (LookupError, roster_mod.RosterError) as exc:
        fail(str(exc), USAGE)
    except roster_mod.AskRefused as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps({**result.__dict__, "cost_usd": str(result.cost_usd)},
                                    ensure_ascii=False, indent=1) + "\n")
        return
    sys.stdout.write(result.answer.rstrip() + "\n")
    err.print(f"ask {result.ask_id}: {result.provider}/{result.model}, {result.input_tokens}+{result.output_tokens}"
              f" tokens, {result.cost_usd} USD")
