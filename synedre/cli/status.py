"""`synedre status`: messages per status, queues and their consumers, the launch switch, and
every dependency's health."""
from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.markup import escape

from synedre.cli.common import DEPENDENCY, console


def status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output")) -> None:
    """Messages per status, queue depths and consumers, launch switch, and every dependency's
    health; exits 3 when one the fleet needs fails (a warning does not), within seconds."""
    from synedre import health
    from tasks.app import app as celery

    snap = health.snapshot(app=celery)
    if as_json:
        sys.stdout.write(json.dumps(snap, ensure_ascii=False, indent=1, default=str) + "\n")
    else:
        _print_status(snap)
    if any(c["level"] == "fail" for c in snap["health"]):
        raise typer.Exit(DEPENDENCY)


def _print_status(snap: dict[str, Any]) -> None:
    msgs = snap["messages"]
    if "error" in msgs:
        console.print(f"[red]messages: {escape(msgs['error'])}[/]", soft_wrap=True)
    else:
        waiting = snap.get("waiting", {})
        console.print("messages: " + (", ".join(
            f"{k} {v}" + (f" ({waiting[k]} waiting)" if waiting.get(k) else "") for k, v in msgs.items() if v)
            + f" (total {sum(msgs.values())})" if any(msgs.values()) else "none"), soft_wrap=True)
        if any((dkim := snap.get("dkim") or {}).values()):
            console.print("dkim: " + ", ".join(f"{k} {v}" for k, v in dkim.items()))
    queues = snap["queues"]
    if "error" in queues:
        console.print(f"[red]queues: {escape(queues['error'])}[/]", soft_wrap=True)
    else:
        consumers = snap.get("consumers")
        console.print("queues: " + ", ".join(
            f"{q} {n}" + ("" if consumers is None else f"/{consumers.get(q, 0)}w") for q, n in queues.items())
            + ("  (depth/consumers)" if consumers is not None else "  (no worker answered)"), soft_wrap=True)
        launches = snap["launches"]
        console.print(f"launches: {'paused: ' + launches['paused'] if launches['paused'] else 'allowed'};"
                      f" slots {launches['slots_in_use']}/{launches['limit']}", soft_wrap=True)
    marks = {"ok": "[green]ok[/]", "warning": "[bold yellow]WARN[/]", "fail": "[bold red]FAIL[/]"}
    for c in snap["health"]:
        console.print(f"{marks[c['level']]} {c['name']}: {escape(c['detail'])}", soft_wrap=True)
