"""Launches: the kill switch (`synedre spawn`), resuming one (`synedre launch resume`), their
locks, the recent ones (or the one-shot asks), and following one live (`synedre tail`)."""
from __future__ import annotations

import json
import sys

import typer
from rich.markup import escape

from synedre.cli.common import FAILED, OK, console, fail, listing, need_database, operator, sub_app
from synedre.config import get_settings
from synedre.pipeline import LaunchStatus

spawn_app = sub_app("The launch kill switch (durable, fleet-wide).")
launch_app = sub_app("One message's launch, by hand.")


@spawn_app.command("pause")
def spawn_pause(reason: str = typer.Option("operator", help="Why, for the record")) -> None:
    """Stop new launches fleet-wide (checked at the start of every launch; survives restarts)."""
    from synedre import kv
    from synedre.spawn import locks

    locks.pause(kv.client(), by=operator(), reason=reason)
    console.print("launches paused")


@spawn_app.command("resume")
def spawn_resume() -> None:
    """Allow launches again; the messages held meanwhile are enqueued at once."""
    from synedre import kv
    from synedre.spawn import locks
    from tasks.spawn import offer_launches

    need_database()
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


@launch_app.command("resume")
def launch_resume(message: str = typer.Argument(..., help="Message-ID header value or internal id")) -> None:
    """Resume a message's last launch, stopped by a timeout (or the loss of its worker), in its
    recorded session: a spawn worker continues the same launch, with the same claim, caps and
    audit as a launch, its events going on in the same stream. Exits 1 when it cannot be resumed."""
    from synedre import db, kv
    from synedre.db import messages
    from synedre.spawn import locks as spawn_locks, session
    from synedre.stages import spawn as stage
    from tasks.app import app as celery

    need_database()
    with db.transaction() as conn:
        mid = messages.lookup(conn, message)
        if mid is None:
            fail(f"no message {message!r}")
        found = stage.resumable(conn, mid, get_settings())
        if isinstance(found, str):  # refused, audited with why
            messages.audit(conn, mid, "spawn_resume_skipped", reason=found, by="operator")
    if isinstance(found, str):
        fail(f"message {mid}: not resumable: {found}")
    if session.gone(get_settings().state_dir, found["id"], found["session_id"]):
        fail(f"message {mid}: not resumable: launch #{found['id']}'s session store is no longer on this host")
    if paused := spawn_locks.spawn_disabled(kv.client(), get_settings().spawn_disabled):
        fail(f"launches are paused ({paused}): `synedre spawn resume` first")
    celery.send_task("synedre.spawn_resume", args=[mid, found["id"], found["attempt"]])
    console.print(f"message {mid}: launch #{found['id']} (stopped: {found['stop_reason']}) enqueued to resume"
                  f" in its session; `synedre tail {mid}` follows it", soft_wrap=True)


def locks(stale_after: float = typer.Option(600.0, min=1, help="Seconds without renewal that count as stale")
          ) -> None:
    """Launch locks held too long without renewal (the watchdog's view); exits 1 if any."""
    from synedre import kv
    from synedre.spawn import locks as spawn_locks

    stale = spawn_locks.stale_locks(kv.client(), older_than_s=stale_after)
    console.print_json(data=stale)
    raise typer.Exit(FAILED if stale else OK)


def list_launches(running: bool = typer.Option(False, "--running", help="Only running launches"),
                  message: str | None = typer.Option(None, "--message", help="Only this message's launches"),
                  wide: bool = typer.Option(False, "--wide", help="Every column, long text whole (folded)"),
                  as_json: bool = typer.Option(False, "--json", help="With contract, verdict, salvage, merge"),
                  asks: bool = typer.Option(False, "--asks", help="One-shot persona asks (synedre agent ask)"
                                                                  " instead of launches")) -> None:
    """Recent launches with their outcome (or the one-shot asks)."""
    from synedre import db
    from synedre.db import messages

    need_database()
    if asks:
        _list_asks(as_json, wide)
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
    listing([{"id": str(r["id"]), "msg": str(r["message_id"]), "try": str(r["attempt"]), "status": r["status"],
              "started": r["started_at"].strftime("%m-%d %H:%M"), "stop": r["stop_reason"] or "",
              "cost": str(r["cost_usd"] or ""), "turns": str(r["num_turns"] or ""), "model": r["model"] or "",
              "prompt": r["system_prompt"] or "",
              "exit": str(r["exit_code"] if r["exit_code"] is not None else ""), "merge": str(r["merge"] or "")}
             for r in rows], whole=("id", "msg", "try", "status", "started"), wide=wide,
            wide_only=("turns", "model", "prompt", "exit", "merge"),
            empty="no running launch" if running else "no launch")


def _list_asks(as_json: bool, wide: bool) -> None:
    from synedre import agents as roster_mod, db

    with db.transaction() as conn:
        rows = roster_mod.recent_asks(conn)
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    listing([{"id": str(r["id"]), "agent": r["agent_codename"], "via": r["via"], "status": r["status"],
              "started": r["started_at"].strftime("%m-%d %H:%M"), "cost": str(r["cost_usd"] or ""),
              "model": r["model"] or "", "tokens": f"{r['input_tokens'] or 0}+{r['output_tokens'] or 0}"}
             for r in rows], whole=("id", "agent", "via", "status", "started"), wide=wide, empty="no ask")


def tail(message: str = typer.Argument(..., help="Message-ID header value or internal id"),
         follow: bool = typer.Option(True, help="Keep following until the launch ends"),
         interval: float = typer.Option(1.0, min=0.1, help="Seconds between reads")) -> None:
    """Follow a message's latest launch events live from the database, like tail -f."""
    import time

    from synedre import db
    from synedre.db import launches, messages

    seen = -1
    need_database()
    with db.transaction() as conn:
        mid = messages.lookup(conn, message)
        if mid is None:
            fail(f"no message {message!r}")
        launch = launches.latest(conn, mid)
        if launch is None:
            fail(f"message {mid} has no launch (status {messages.status_of(conn, mid) or '?'})")
    while True:
        with db.transaction() as conn:
            status = launches.status_of(conn, launch["id"])
            rows = launches.events_after(conn, launch["id"], seen)
        for r in rows:
            seen = r["seq"]
            if r["event_type"] == "stream_event":
                continue
            console.print(f"{r['seq']:5d} {r['event_type']}{'/' + r['subtype'] if r['subtype'] else ''}"
                          f"{' ' + r['tool_name'] if r['tool_name'] else ''} {escape(_summary(r['payload']))}")
        if not follow or status != LaunchStatus.RUNNING:
            if seen < 0:
                console.print(f"launch #{launch['id']} ({status}) has no event")
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
