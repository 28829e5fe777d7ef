"""Operate the Synedre fleet (an email in, executed work out): run it, see its status,
inspect and retry messages, pause launches."""
from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from synedre import log as logging_setup
from synedre.config import Settings, get_settings
from synedre.pipeline import LaunchStatus

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
db_app = typer.Typer(no_args_is_help=True, help="Database schema.")
directory_app = typer.Typer(no_args_is_help=True, help="Founder, clients, people, chantiers.")
app.add_typer(db_app, name="db")
app.add_typer(directory_app, name="directory")
report_app = typer.Typer(no_args_is_help=True, help="Reports.")
app.add_typer(report_app, name="report")
spawn_app = typer.Typer(no_args_is_help=True, help="The launch kill switch (durable, fleet-wide).")
app.add_typer(spawn_app, name="spawn")
# Piped output keeps whole lines (rich would otherwise assume 80 columns and cut cells).
console = Console(width=None if sys.stdout.isatty() else 400)
err = Console(stderr=True, soft_wrap=True)


# `synedre fleet` looks at its dependencies this often; one down this long is an incident.
DEPENDENCY_CHECK_S, DEPENDENCY_DOWN_S = 30.0, 300.0


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def _table(*names: str, no_wrap: tuple[str, ...] = ("id",)) -> Table:
    """A table that fits the terminal by folding long cells onto more lines, never cutting
    them: a status or a codename is always shown whole. Ids never wrap."""
    table = Table()
    for name in names:
        table.add_column(name, overflow="fold", no_wrap=name in no_wrap)
    return table


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v",
                                       help="Log at DEBUG, here and in every process this command starts")) -> None:
    if verbose:  # through the environment, so the fleet's children log at DEBUG too
        os.environ["SYNEDRE_LOG_LEVEL"] = "DEBUG"
        get_settings.cache_clear()
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


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL (the fleet stops it too when it exits)."""
    from synedre import db

    if get_settings().database_url:
        fail("SYNEDRE_DATABASE_URL is set: that server is not ours to stop", 2)
    console.print("embedded database stopped" if db.stop_embedded() else "embedded database was not running")


@db_app.command("url")
def db_url() -> None:
    """The database URL (embedded or configured), for `psql "$(synedre db url)"`."""
    from urllib.parse import urlsplit, urlunsplit

    from synedre import db

    u = urlsplit(db.database_url())
    if u.password:  # never print a password: psql reads it from PGPASSWORD or ~/.pgpass
        u = u._replace(netloc=u.netloc.replace(f":{u.password}@", "@"))
    sys.stdout.write(urlunsplit(u) + "\n")


@directory_app.command("mockup")
def directory_mockup(chantier: str, route: str, image: Path) -> None:
    """Attach a mock-up image to a route of a chantier: QA compares the page with it."""
    import re
    import shutil

    from synedre import db
    from synedre.orchestrate import iso

    try:
        iso.load_image(image)
    except (OSError, iso.IsoError) as exc:
        fail(f"{image}: not a readable image ({exc})", 2)
    with db.transaction() as conn:
        row = conn.execute("SELECT id FROM synedre.chantiers WHERE codename = %s", (chantier,)).fetchone()
        if row is None:
            fail(f"no chantier {chantier!r}")
        # a private copy: QA workers must not depend on the operator's file staying put
        target = (get_settings().state_dir / "mockups" / chantier).resolve()
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        copy = target / f"{re.sub(r'[^A-Za-z0-9]+', '-', route).strip('-') or 'root'}.png"
        shutil.copyfile(image, copy)
        os.chmod(copy, 0o600)
        conn.execute("INSERT INTO synedre.mockups (chantier_id, route, path) VALUES (%s, %s, %s)"
                     " ON CONFLICT (chantier_id, route) DO UPDATE SET path = EXCLUDED.path",
                     (row["id"], route, str(copy)))
    console.print(f"mock-up for {chantier} {route}: {copy}")


@directory_app.command("import")
def directory_import(file: Path) -> None:
    """Load the directory from a JSON file; re-importing updates, never duplicates."""
    from pydantic import ValidationError

    from synedre import db
    from synedre.db.directory import DirectoryFile, import_directory

    try:
        d = DirectoryFile.model_validate_json(file.read_bytes())
    except (OSError, ValidationError) as exc:
        fail(f"cannot import {file}: {exc}")
    with db.transaction() as conn:
        counts = import_directory(conn, d)
    console.print(f"imported {counts}")


@app.command()
def inspect(
    message: str | None = typer.Argument(None, help="Message-ID header value or internal id"),
    all_: bool = typer.Option(False, "--all", help="Every message (one line each)"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output, details included"),
) -> None:
    """Show a message: status, why it waits, every audit with its time and detail, its launches."""
    from synedre import db
    from synedre.db import messages

    if not all_ and not message:
        fail("give a MESSAGE or --all", 2)
    with db.transaction() as conn:
        ids: list[int] | None = None
        if not all_:
            assert message is not None
            mid = messages.lookup(conn, message)
            if mid is None:
                fail(f"no message {message!r}")
            ids = [mid]
        rows = messages.describe(conn, ids, details=not all_)
    if not all_:
        rows[0]["waiting"] = _waiting(rows[0])
    if as_json:
        sys.stdout.write(json.dumps(rows if all_ else rows[0], ensure_ascii=False, indent=1, default=str) + "\n")
        return
    if all_:
        table = _table("id", "status", "dkim", "intent", "client", "subject", "waiting")
        for r in rows:
            table.add_row(str(r["id"]), r["status"], "✓" if r["dkim_pass"] else "✗", _intent(r),
                          _client(r), escape((r["subject"] or "")[:60]), escape(r["waiting_reason"] or ""))
        console.print(table)
        return
    r = rows[0]
    console.print(f"[bold]message {r['id']}[/] {escape(r['message_id'])}  from {escape(r['from'] or '?')}"
                  f"  dkim {'pass' if r['dkim_pass'] else 'fail'}")
    console.print(f"subject: {escape(r['subject'] or '')}")
    done = r["materialized"]
    made = f"{done['kind']} #{done['id']}" if done else "-"
    console.print(f"status: [bold]{r['status']}[/]  intent: {_intent(r) or '-'}  client: {_client(r) or '-'}"
                  f"  materialized: {made}")
    if r["waiting"]:
        console.print(f"[yellow]waiting:[/] {escape(r['waiting'])}")
    console.print("audit:")
    for a in r["audit"]:
        detail = json.dumps(a["detail"], ensure_ascii=False, default=str) if a["detail"] else ""
        console.print(f"  {a['at'][:19]}  {a['event']}  {escape(detail)}", soft_wrap=True)
    for launch in r["launches"]:
        console.print(f"launch #{launch['id']} attempt {launch['attempt']}: {launch['status']}"
                      f" ({launch['stop_reason'] or '-'}), model {launch['model']}, cost {launch['cost_usd']},"
                      f" session {launch['session_id'] or '-'}", soft_wrap=True)
        for key in ("contract", "salvage"):
            if launch.get(key):
                console.print(f"  {key}: {escape(json.dumps(launch[key], ensure_ascii=False, default=str))}",
                              soft_wrap=True)


def _intent(r: dict) -> str:
    if not r["intent"]:
        return ""
    return f"{r['intent']}/{r['complexity']} {r['confidence']:.2f}" if r["confidence"] is not None else r["intent"]


def _client(r: dict) -> str:
    return f"{r['client']['codename'] or 'no client'} ({r['client']['source']})" if r["client"] else ""


def _waiting(r: dict) -> str | None:
    """Why the message is not moving now: its recorded reason, else its queue's consumers."""
    from synedre.pipeline import TERMINAL, consumer_of

    if r["status"] in TERMINAL:
        return None
    reason = r["waiting_reason"]
    if r.get("waiting_until"):
        reason = f"{reason} (until {str(r['waiting_until'])[:19]})"
    stage = consumer_of(r["status"])
    if stage is not None:
        from synedre.health import queue_consumers
        from tasks.app import app as celery

        consumers = queue_consumers(celery)
        if consumers is not None and consumers.get(stage.queue, 0) == 0:
            reason = "; ".join(filter(None, [reason, f"queue {stage.queue} has no consumer"]))
        elif reason is None:
            reason = f"queued for {stage.name}"
    return reason


@app.command()
def retry(
    message: str | None = typer.Argument(None, help="Message-ID header value or internal id"),
    from_stage: str | None = typer.Option(None, "--from", help="Stage to re-run (default: the failed one)"),
    status: str | None = typer.Option(None, "--status", help="Every message at this status"),
    since: str | None = typer.Option(None, help="With --status: only those there since (e.g. 2h, 1d, 2026-12-01)"),
    reason: str = typer.Option(..., "--reason", help="Why, for the audit"),
) -> None:
    """Send messages back to a stage and enqueue them (audited `retry_requested`)."""
    from synedre import db, runner
    from synedre.db import messages
    from synedre.pipeline import Status
    from tasks.app import enqueue

    if bool(message) == bool(status):
        fail("give a MESSAGE or --status STATUS", 2)
    if status is not None and status not in {str(s) for s in Status}:
        fail(f"unknown status {status!r} (statuses: {', '.join(Status)})", 2)
    by = os.environ.get("USER", "operator")
    with db.transaction() as conn:
        if message:
            found = messages.lookup(conn, message)
            if found is None:
                fail(f"no message {message!r}")
            ids = [found]
        else:
            ids = messages.at_status(conn, status or "", _since(since))
    done, refused = [], []
    for mid in ids:
        try:
            with db.transaction() as conn:
                stage, old = runner.reenter(conn, mid, from_stage, reason=reason, by=by)
        except runner.RetryRefused as exc:
            refused.append((mid, str(exc)))
            continue
        enqueue(stage.name, mid)
        done.append(mid)
        console.print(f"message {mid}: {old} -> {stage.entry[0]}, enqueued for {stage.name}")
    for mid, why in refused:
        err.print(f"[bold red]refused:[/] message {mid}: {escape(why)}")
    if not ids:
        console.print(f"no message at {status}")
    if refused and not done:
        raise typer.Exit(1)


def _since(value: str | None):
    from datetime import datetime, timedelta

    if value is None:
        return None
    units = {"m": "minutes", "h": "hours", "d": "days"}
    if value[:-1].isdigit() and value[-1] in units:
        return datetime.now(UTC) - timedelta(**{units[value[-1]]: int(value[:-1])})
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        fail(f"--since {value!r}: give 30m, 2h, 1d or an ISO date", 2)


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output")) -> None:
    """Messages per status, queue depths and consumers, launch switch, and every dependency's health."""
    from synedre import health
    from tasks.app import app as celery

    snap = health.snapshot(app=celery)
    if as_json:
        sys.stdout.write(json.dumps(snap, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    msgs = snap["messages"]
    if "error" in msgs:
        console.print(f"[red]messages: {escape(msgs['error'])}[/]")
    else:
        waiting = snap.get("waiting", {})
        console.print("messages: " + ", ".join(
            f"{k} {v}" + (f" ({waiting[k]} waiting)" if waiting.get(k) else "") for k, v in msgs.items() if v)
            + f" (total {sum(msgs.values())})", soft_wrap=True)
    queues = snap["queues"]
    if "error" in queues:
        console.print(f"[red]queues: {escape(queues['error'])}[/]")
    else:
        consumers = snap.get("consumers")
        console.print("queues: " + ", ".join(
            f"{q} {n}" + ("" if consumers is None else f"/{consumers.get(q, 0)}w") for q, n in queues.items())
            + ("  (depth/consumers)" if consumers is not None else "  (no worker answered)"), soft_wrap=True)
        launches = snap["launches"]
        console.print(f"launches: {'paused: ' + launches['paused'] if launches['paused'] else 'allowed'};"
                      f" slots {launches['slots_in_use']}/{launches['limit']}", soft_wrap=True)
    for c in snap["health"]:
        mark = "[green]ok[/]" if c["ok"] else "[bold red]FAIL[/]"
        console.print(f"{mark} {c['name']}: {escape(c['detail'])}", soft_wrap=True)


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
    from tasks.spawn import offer_launches

    locks.resume(kv.client())
    console.print(f"launches resumed; {offer_launches()} held message(s) enqueued")


@spawn_app.command("status")
def spawn_status() -> None:
    """Is launching allowed, and how many slots are taken."""
    from synedre import kv
    from synedre.spawn import locks

    r = kv.client()
    s = get_settings()
    console.print_json(data={**locks.status(r), "env_disabled": s.spawn_disabled,
                             "disabled_reason": locks.spawn_disabled(r, s.spawn_disabled),
                             "slots_in_use": locks.LaunchSemaphore(r, limit=s.max_concurrent_launches).in_use(),
                             "limit": s.max_concurrent_launches})


@app.command()
def locks(stale_after: float = typer.Option(600.0, help="Seconds without renewal that count as stale")) -> None:
    """Launch locks held too long without renewal (the watchdog's view)."""
    from synedre import kv
    from synedre.spawn import locks as spawn_locks

    stale = spawn_locks.stale_locks(kv.client(), older_than_s=stale_after)
    console.print_json(data=stale)
    raise typer.Exit(1 if stale else 0)


@app.command("launches")
def list_launches(running: bool = typer.Option(False, "--running", help="Only running launches"),
                  message: str | None = typer.Option(None, "--message", help="Only this message's launches"),
                  as_json: bool = typer.Option(False, "--json", help="With contract, verdict, salvage, merge"),
                  asks: bool = typer.Option(False, "--asks", help="One-shot persona asks (synedre agent ask)"
                                                                  " instead of launches")) -> None:
    """Recent launches with their outcome."""
    from synedre import db
    from synedre.db import messages

    if asks:
        _list_asks(as_json)
        return
    with db.transaction() as conn:
        mid = None
        if message:
            mid = messages.lookup(conn, message)
            if mid is None:
                fail(f"no message {message!r}")
        rows = [r for r in messages.launches_of(conn, mid) if not running or r["status"] == LaunchStatus.RUNNING]
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    table = _table("id", "message", "try", "status", "model", "prompt", "turns", "cost", "exit", "stop", "merge",
                   "started", no_wrap=("id", "message", "try"))
    for r in rows:
        table.add_row(str(r["id"]), str(r["message_id"]), str(r["attempt"]), r["status"], r["model"] or "",
                      r["system_prompt"] or "", str(r["num_turns"] or ""), str(r["cost_usd"] or ""),
                      str(r["exit_code"] if r["exit_code"] is not None else ""), r["stop_reason"] or "",
                      str(r["merge"] or ""), r["started_at"].strftime("%Y-%m-%d %H:%M:%S"))
    console.print(table)


def _list_asks(as_json: bool) -> None:
    from synedre import agents as roster_mod, db

    with db.transaction() as conn:
        rows = roster_mod.recent_asks(conn)
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    table = _table("id", "agent", "via", "status", "model", "tokens", "cost", "started", no_wrap=("id",))
    for r in rows:
        table.add_row(str(r["id"]), r["agent_codename"], r["via"], r["status"], r["model"] or "",
                      f"{r['input_tokens'] or 0}+{r['output_tokens'] or 0}", str(r["cost_usd"] or ""),
                      r["started_at"].strftime("%Y-%m-%d %H:%M:%S"))
    console.print(table)


@app.command()
def tail(message: str, follow: bool = typer.Option(True, help="Keep following until the launch ends"),
         interval: float = typer.Option(1.0, help="Seconds between reads")) -> None:
    """Follow a message's launch events live from the database, like tail -f."""
    import time

    from synedre import db
    from synedre.db import messages

    seen = -1
    with db.transaction() as conn:
        mid = messages.lookup(conn, message)
    if mid is None:
        fail(f"no message {message!r}")
    while True:
        with db.transaction() as conn:
            launch = conn.execute("SELECT id, status FROM synedre.launches WHERE message_id = %s"
                                  " ORDER BY attempt DESC LIMIT 1", (mid,)).fetchone()
            if launch is None:
                state = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s",
                                     (mid,)).fetchone()
                fail(f"message {mid} has no launch (status {state['status'] if state else '?'})")
            rows = [] if launch is None else conn.execute(
                "SELECT seq, event_type, subtype, tool_name, payload FROM synedre.launch_events"
                " WHERE launch_id = %s AND seq > %s ORDER BY seq", (launch["id"], seen)).fetchall()
        for r in rows:
            seen = r["seq"]
            if r["event_type"] == "stream_event":
                continue
            console.print(f"{r['seq']:5d} {r['event_type']}{'/' + r['subtype'] if r['subtype'] else ''}"
                          f"{' ' + r['tool_name'] if r['tool_name'] else ''} {escape(_summary(r['payload']))}")
        if not follow or (launch is not None and launch["status"] != LaunchStatus.RUNNING):
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
    from synedre import mailboxes
    from synedre.mailboxes import RegistryError

    try:
        mailboxes.get(mailbox)  # an unknown mailbox is refused here, not in a worker
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

    from synedre import mailboxes
    from synedre.ingest.idle import watch_all
    from tasks.app import app as celery

    try:
        boxes = list(mailboxes.load().values())
    except mailboxes.RegistryError as exc:
        fail(str(exc), 2)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    expires = get_settings().poll_interval_s
    failed = watch_all(boxes, lambda box: celery.send_task("synedre.poll", args=[box], expires=expires), stop)
    if failed and not stop.is_set():
        # Every watcher has given up (a refused login, no IDLE): exit so the fleet restarts
        # us after its backoff, which also picks up a corrected registry or password.
        fail(f"IDLE watcher stopped for {', '.join(failed)}; see the idle_failed log lines", 1)


@app.command()
def flower(address: str | None = typer.Option(None, help="Interface to listen on (default: SYNEDRE_FLOWER_ADDRESS,"
                                                         " itself 127.0.0.1)"),
           port: int | None = typer.Option(None, help="Port (default: SYNEDRE_FLOWER_PORT, itself 5555)")) -> None:
    """Flower, the Celery dashboard: on 127.0.0.1 by default, never without authentication.

    Credentials (user:password) come from FLOWER_BASIC_AUTH or the file SYNEDRE_FLOWER_AUTH_FILE names.
    They reach Flower through its environment, never its command line; without them it exits 2."""
    s = get_settings()
    auth, why = s.flower_auth()
    if auth is None:  # its API can send tasks, hence launch agents (SPEC §12b)
        fail(f"{why}: Flower never runs without authentication", 2)
    argv = [sys.executable, "-m", "celery", "-A", "tasks", "flower",
            f"--address={address or s.flower_address}", f"--port={port or s.flower_port}"]
    # The credentials go through the environment, which Flower reads itself: never in
    # argv, which every user of the machine can read in /proc.
    os.execve(sys.executable, argv, {**os.environ, "FLOWER_BASIC_AUTH": auth.get_secret_value()})


@app.command()
def metrics(address: str = typer.Option("127.0.0.1", help="Interface to listen on"),
            port: int = typer.Option(9808, help="Port")) -> None:
    """A Prometheus endpoint (/metrics): messages per status, stage durations, launches by outcome,
    spend today against the cap, queue depths and the kill switch, read at each scrape."""
    from synedre import metrics as endpoint

    endpoint.serve(address, port)


@app.command()
def fleet(grace: float = typer.Option(120.0, help="Seconds running tasks get to finish on stop"),
          with_flower: bool = typer.Option(False, "--flower", help="Also run Flower (as `synedre flower`)")) -> None:
    """Run everything: migrations, then beat, the workers and the IDLE watcher (and Flower)."""
    from synedre import db, fleet as fleet_mod
    from synedre.db.migrate import MigrationError, upgrade

    s = get_settings()
    boxes = _fleet_preflight(s, with_flower)
    env = dict(os.environ, SYNEDRE_DATABASE_URL=db.database_url(s))
    try:
        done = upgrade(s.migrations_dir, env["SYNEDRE_DATABASE_URL"])
    except MigrationError as exc:
        fail(str(exc))
    from synedre import health

    for c in health.check_all(s):
        if not c.ok:
            err.print(f"[bold yellow]warning:[/] {c.name}: {escape(c.detail)}")
    console.print(f"[green]database ready[/] ({len(done)} migration(s) applied); "
                  f"mailboxes: {', '.join(boxes)}; Ctrl-C stops everything cleanly")
    embedded = not s.database_url

    def restart_loop(child: str, restarts: int, window_s: float) -> None:
        from synedre import incidents

        incidents.safely(incidents.restart_loop(child, restarts, window_s))

    code = fleet_mod.supervise(fleet_mod.children(flower=with_flower), env, grace,
                                watch=_dependency_watch(s, embedded), on_restart_loop=restart_loop)
    if embedded and db.stop_embedded(s):
        console.print("embedded database stopped")
    raise typer.Exit(code)


def _fleet_preflight(s: Settings, with_flower: bool) -> dict[str, Any]:
    """What the fleet cannot start without, each refused in one line: the mailboxes and
    their passwords, Flower's credentials when asked for, a reachable Redis."""
    from synedre import kv, mailboxes

    try:
        boxes = mailboxes.load()
        for box in boxes.values():
            box.password()
    except mailboxes.RegistryError as exc:
        fail(str(exc), 2)
    if with_flower and (why := s.flower_auth()[1]):
        fail(f"--flower: {why}: Flower never runs without authentication", 2)
    try:
        kv.client().ping()
    except Exception as exc:
        fail(f"Redis at SYNEDRE_BROKER_URL is not reachable ({type(exc).__name__}); "
             "start it or point SYNEDRE_BROKER_URL at one", 2)
    return boxes


def _dependency_watch(s: Settings, embedded: bool) -> Callable[[], None]:
    """The supervisor's periodic check: the embedded database restarted if it died, an
    incident for a dependency down longer than DEPENDENCY_DOWN_S."""
    import time

    from synedre import db, health, incidents
    from synedre.log import log

    down_since: dict[str, float] = {}
    checked_at = [0.0]

    def watch_database() -> None:
        if embedded and db.ensure_embedded(s):
            log.error("embedded_database_restarted", pgdata=str(db.embedded_pgdata(s)))
        now = time.monotonic()
        if now - checked_at[0] < DEPENDENCY_CHECK_S:
            return
        checked_at[0] = now
        for c in (health.check_postgres(), health.check_redis(), health.check_clamd(s)):
            if c.ok or "WARNING" in c.detail:  # a warning is a configuration matter, not an outage
                down_since.pop(c.name, None)
                continue
            since = down_since.setdefault(c.name, now)
            if now - since >= DEPENDENCY_DOWN_S:  # coalesced by kind and hour in incidents
                incidents.safely(incidents.dependency_down(c.name, now - since))
    return watch_database


agent_app = typer.Typer(no_args_is_help=True, help="One agent, one-shot (SPEC §9.8).")
app.add_typer(agent_app, name="agent")


@app.command("agents")
def agents_roster(family: str | None = typer.Option(None, "--family", help="Only this family (group_name)"),
                  domain: str | None = typer.Option(None, "--domain",
                                                    help="Only agents configured for this prompt domain"),
                  as_json: bool = typer.Option(False, "--json", help="Machine-readable output"),
                  check: bool = typer.Option(False, "--check",
                                             help="Report stored orbits that disagree with the family's ring;"
                                                  " exit 1 if any")) -> None:
    """The agent roster: stored orbit and display ring side by side, prompt-domain routing."""
    from synedre import agents as roster_mod, db

    try:
        with db.transaction() as conn:
            rows = roster_mod.roster(conn, family=family, domain=domain)
            routed = roster_mod.route_domain(conn, domain) if domain else None
    except roster_mod.RosterError as exc:
        fail(str(exc), 2)
    if check:
        rows = roster_mod.disagreements(rows)
    records = [{**a.as_record(), **({"routed": a == routed} if domain else {})} for a in rows]
    if as_json:
        sys.stdout.write(json.dumps(records, ensure_ascii=False, indent=1) + "\n")
    elif check and not rows:
        console.print("every stored orbit agrees with its family's ring")
    else:
        table = _table("codename", "nickname", "role", "family", "orbite", "ring", "active", "domains",
                       no_wrap=("codename", "orbite", "ring"))
        for a in rows:
            orbit = str(a.orbite) if a.orbit_agrees else f"[bold red]{a.orbite}[/] (ring {a.ring})"
            table.add_row(a.codename, escape(a.nickname), escape(a.role), a.family, orbit, str(a.ring),
                          "yes" if a.active else "no", ", ".join(a.prompt_domains))
        console.print(table)
        if domain:
            console.print(f"domain {domain} -> {routed.codename} ({escape(routed.nickname)})" if routed
                          else f"domain {domain} -> no active agent")
    if check and rows:
        err.print(f"{len(rows)} agent(s) whose stored orbit disagrees with their family's ring: "
                  + ", ".join(a.codename for a in rows))
        raise typer.Exit(1)


@agent_app.command("ask")
def agent_ask(codename: str, question: str,
              via: str = typer.Option("facade", "--via", help="facade (the AI facade) or claude (a short claude -p)"),
              as_json: bool = typer.Option(False, "--json", help="The answer with its journal row")) -> None:
    """One persona answers one question, journalled with its cost (shown by `synedre launches --asks`)."""
    from synedre import agents as roster_mod

    if via not in ("facade", "claude"):
        fail(f"--via must be facade or claude, not {via!r}", 2)
    try:
        result = roster_mod.ask(codename, question, via="claude" if via == "claude" else "facade")
    except (LookupError, roster_mod.RosterError) as exc:
        fail(str(exc), 2)
    except roster_mod.AskRefused as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps({**result.__dict__, "cost_usd": str(result.cost_usd)},
                                    ensure_ascii=False, indent=1) + "\n")
        return
    sys.stdout.write(result.answer.rstrip() + "\n")
    err.print(f"ask {result.ask_id}: {result.provider}/{result.model}, {result.input_tokens}+{result.output_tokens}"
              f" tokens, {result.cost_usd} USD")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
