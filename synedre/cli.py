"""The `synedre` command."""
from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from synedre import log as logging_setup
from synedre.config import get_settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
db_app = typer.Typer(no_args_is_help=True, help="Database schema.")
directory_app = typer.Typer(no_args_is_help=True, help="Founder, clients, people, chantiers.")
app.add_typer(db_app, name="db")
app.add_typer(directory_app, name="directory")
report_app = typer.Typer(no_args_is_help=True, help="Reports.")
app.add_typer(report_app, name="report")
spawn_app = typer.Typer(no_args_is_help=True, help="The launch kill switch (durable, fleet-wide).")
app.add_typer(spawn_app, name="spawn")
console = Console()
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


@app.callback()
def _main() -> None:
    s = get_settings()
    logging_setup.configure(s.log_format, s.log_level)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations (idempotent; refuses a database with unknown migrations)."""
    from synedre.db.migrate import MigrationError, upgrade

    try:
        done = upgrade(get_settings().migrations_dir)
    except MigrationError as exc:
        fail(str(exc))
    console.print(f"applied: {', '.join(done)}" if done else "database is up to date")


@db_app.command("status")
def db_status() -> None:
    """List applied and pending migrations."""
    from synedre.db.migrate import status

    console.print_json(data=status(get_settings().migrations_dir))


@directory_app.command("import")
def directory_import(file: Path) -> None:
    """Load the directory from a JSON file; re-importing updates, never duplicates."""
    from pydantic import ValidationError

    from synedre import db
    from synedre.db.directory import Directory, import_directory

    try:
        d = Directory.model_validate_json(file.read_bytes())
    except (OSError, ValidationError) as exc:
        fail(f"cannot import {file}: {exc}")
    with db.transaction() as conn:
        counts = import_directory(conn, d)
    console.print(f"imported {counts}")


@app.command()
def inspect(
    message: Optional[str] = typer.Argument(None, help="Message-ID header value or internal id"),
    all_: bool = typer.Option(False, "--all", help="Every message"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output"),
) -> None:
    """Show a message (or all of them) with its status and audit trail."""
    from synedre import db
    from synedre.db import messages

    if not all_ and not message:
        fail("give a MESSAGE or --all", 2)
    with db.transaction() as conn:
        ids = None
        if not all_:
            mid = messages.lookup(conn, message)
            if mid is None:
                fail(f"no message {message!r}")
            ids = [mid]
        rows = messages.describe(conn, ids)
    if as_json:
        sys.stdout.write(json.dumps(rows if all_ else rows[0], ensure_ascii=False, indent=1) + "\n")
        return
    table = Table("id", "status", "dkim", "intent", "client", "subject", "audits")
    for r in rows:
        client = r["client"] and f"{r['client']['codename']} ({r['client']['source']})"
        intent = r["intent"] and f"{r['intent']}/{r['complexity']} {r['confidence']:.2f}"
        table.add_row(str(r["id"]), r["status"], "✓" if r["dkim_pass"] else "✗", intent or "",
                      client or "", (r["subject"] or "")[:50], ", ".join(r["audits"]))
    console.print(table)


@report_app.command("calibration")
def report_calibration(days: int = typer.Option(30, min=1, help="Window, in days")) -> None:
    """The classifier's calibration report (markdown) with the Phase 3 gate."""
    from synedre import db
    from synedre.report.calibration import collect, render

    with db.transaction() as conn:
        sys.stdout.write(render(collect(conn, days=days)) + "\n")


@spawn_app.command("pause")
def spawn_pause(reason: str = typer.Option("operator", help="Why, for the record")) -> None:
    """Stop new launches fleet-wide (checked at the start of every launch; survives restarts)."""
    from synedre import kv
    from synedre.spawn import locks

    locks.pause(kv.client(), by=os.environ.get("USER", "operator"), reason=reason)
    console.print("launches paused")


@spawn_app.command("resume")
def spawn_resume() -> None:
    """Allow launches again."""
    from synedre import kv
    from synedre.spawn import locks

    locks.resume(kv.client())
    console.print("launches resumed")


@spawn_app.command("status")
def spawn_status() -> None:
    """Is launching allowed, and how many slots are taken."""
    from synedre import kv
    from synedre.spawn import locks

    r = kv.client()
    s = get_settings()
    console.print_json(data={**locks.status(r), "env_disabled": s.spawn_disabled,
                             "disabled_reason": locks.spawn_disabled(r, s.spawn_disabled),
                             "slots_in_use": locks.LaunchSemaphore(r, limit=s.max_concurrent_launches).in_use()})


@app.command()
def locks(stale_after: float = typer.Option(600.0, help="Seconds without renewal that count as stale")) -> None:
    """Launch locks held too long without renewal (the watchdog's view)."""
    from synedre import kv
    from synedre.spawn import locks as spawn_locks

    stale = spawn_locks.stale_locks(kv.client(), older_than_s=stale_after)
    console.print_json(data=stale)
    raise typer.Exit(1 if stale else 0)


@app.command("launches")
def list_launches(running: bool = typer.Option(False, "--running", help="Only running launches")) -> None:
    """Recent launches with their outcome."""
    from synedre import db

    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT l.id, l.message_id, l.attempt, l.status, l.model, l.system_prompt, l.session_id,"
            " l.num_turns, l.cost_usd, l.exit_code, l.stop_reason, l.started_at, l.ended_at"
            " FROM synedre.launches l WHERE NOT %s OR l.status = 'running' ORDER BY l.id DESC LIMIT 50",
            (running,)).fetchall()
    table = Table("id", "message", "try", "status", "model", "prompt", "turns", "cost", "exit", "stop", "started")
    for r in rows:
        table.add_row(str(r["id"]), str(r["message_id"]), str(r["attempt"]), r["status"], r["model"] or "",
                      r["system_prompt"] or "", str(r["num_turns"] or ""), str(r["cost_usd"] or ""),
                      str(r["exit_code"] if r["exit_code"] is not None else ""), r["stop_reason"] or "",
                      r["started_at"].strftime("%Y-%m-%d %H:%M:%S"))
    console.print(table)


@app.command()
def tail(message: str, follow: bool = typer.Option(True, help="Keep following until the launch ends"),
         interval: float = typer.Option(1.0, help="Seconds between reads")) -> None:
    """Follow a message's launch events live from the database, like tail -f."""
    import time

    from synedre import db
    from synedre.db import messages as sql

    seen = -1
    with db.transaction() as conn:
        mid = sql.lookup(conn, message)
    if mid is None:
        fail(f"no message {message!r}")
    while True:
        with db.transaction() as conn:
            launch = conn.execute("SELECT id, status FROM synedre.launches WHERE message_id = %s"
                                  " ORDER BY attempt DESC LIMIT 1", (mid,)).fetchone()
            rows = [] if launch is None else conn.execute(
                "SELECT seq, event_type, subtype, tool_name, payload FROM synedre.launch_events"
                " WHERE launch_id = %s AND seq > %s ORDER BY seq", (launch["id"], seen)).fetchall()
        for r in rows:
            seen = r["seq"]
            if r["event_type"] == "stream_event":
                continue
            console.print(f"{r['seq']:5d} {r['event_type']}{'/' + r['subtype'] if r['subtype'] else ''}"
                          f"{' ' + r['tool_name'] if r['tool_name'] else ''} {escape(_summary(r['payload']))}")
        if not follow or (launch is not None and launch["status"] != "running"):
            return
        time.sleep(interval)


def _summary(payload: dict) -> str:
    content = (payload.get("message") or {}).get("content") or []
    for block in content if isinstance(content, list) else []:
        if block.get("type") == "tool_use":
            return json.dumps(block.get("input"), ensure_ascii=False)[:100]
        if block.get("type") == "text":
            return block.get("text", "")[:100]
        if block.get("type") == "tool_result":
            return str(block.get("content"))[:100]
    if payload.get("type") == "result":
        return f"{payload.get('subtype')} turns={payload.get('num_turns')} cost={payload.get('total_cost_usd')}"
    return ""


@app.command()
def poll(mailbox: str = typer.Argument("atlas"),
         wait: bool = typer.Option(False, help="Run here and now instead of enqueueing")) -> None:
    """Ask for a poll of a mailbox (the same task beat and IDLE trigger)."""
    from synedre.mail.registry import RegistryError

    try:
        if wait:
            from tasks.poll import poll as poll_task
            console.print_json(data=poll_task.apply(args=[mailbox]).get())
        else:
            from tasks.app import app as celery
            console.print(f"enqueued {celery.send_task('synedre.poll', args=[mailbox]).id}")
    except RegistryError as exc:
        fail(str(exc))


@app.command()
def idle() -> None:
    """Watch every registered mailbox with IMAP IDLE and trigger polls (run by the fleet)."""
    import signal

    from synedre.ingest.idle import watch_all
    from synedre.mail import registry
    from tasks.app import app as celery

    try:
        boxes = list(registry.load().values())
    except registry.RegistryError as exc:
        fail(str(exc), 2)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    expires = get_settings().poll_interval_s
    watch_all(boxes, lambda box: celery.send_task("synedre.poll", args=[box], expires=expires), stop)


@app.command()
def fleet(grace: float = typer.Option(120.0, help="Seconds running tasks get to finish on stop")) -> None:
    """Run everything: migrations, then beat, the workers and the IDLE watcher."""
    from synedre import db, fleet as fleet_mod, kv
    from synedre.db.migrate import MigrationError, upgrade
    from synedre.mail import registry

    s = get_settings()
    try:
        boxes = registry.load()
        for box in boxes.values():
            box.password()
    except registry.RegistryError as exc:
        fail(str(exc), 2)
    try:
        kv.client().ping()
    except Exception as exc:
        fail(f"Redis at SYNEDRE_BROKER_URL is not reachable ({type(exc).__name__}); "
             "start it or point SYNEDRE_BROKER_URL at one", 2)
    env = dict(os.environ, SYNEDRE_DATABASE_URL=db.database_url(s))
    try:
        done = upgrade(s.migrations_dir, env["SYNEDRE_DATABASE_URL"])
    except MigrationError as exc:
        fail(str(exc))
    console.print(f"[green]database ready[/] ({len(done)} migration(s) applied); "
                  f"mailboxes: {', '.join(boxes)}; Ctrl-C stops everything cleanly")
    raise typer.Exit(fleet_mod.supervise(fleet_mod.children(), env, grace))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
