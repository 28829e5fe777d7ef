"""`synedre inspect` and `synedre retry`: one message (or all) with why it waits, and sending
messages back to a stage."""
from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape

from synedre.cli.common import FAILED, USAGE, console, err, explain, fail, listing, need_database, operator
from synedre.config import get_settings
from synedre.pipeline import STAGES, Status

RETRY_STAGES = tuple(s.name for s in STAGES if s.entry)


def inspect(
    message: str | None = typer.Argument(None, help="Message-ID header value or internal id"),
    all_: bool = typer.Option(False, "--all", help="Every message (one line each)"),
    wide: bool = typer.Option(False, "--wide", help="With --all: long text whole (folded), intent and DKIM"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output, details included"),
) -> None:
    """Show a message: status, why it waits, every audit with its time and detail, its launches."""
    from synedre import db
    from synedre.db import messages

    if not all_ and not message:
        fail("give a MESSAGE or --all", USAGE)
    need_database()
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
    elif all_:
        listing([{"id": str(r["id"]), "status": r["status"], "client": _client(r, False),
                  "subject": r["subject"] or "", "waiting": r["waiting_reason"] or "", "intent": _intent(r),
                  "dkim": r["dkim"] or "-"} for r in rows],
                whole=("id", "status", "client"), wide=wide, wide_only=("intent", "dkim"), empty="no message")
    else:
        _describe(rows[0])


def _describe(r: dict[str, Any]) -> None:
    console.print(f"[bold]message {r['id']}[/] {escape(r['message_id'])}  from {escape(r['from'] or '?')}"
                  f"  dkim {escape(_dkim(r))}")
    console.print(f"subject: {escape(r['subject'] or '')}")
    done = r["materialized"]
    made = f"{done['kind']} #{done['id']}" if done else "-"
    console.print(f"status: [bold]{r['status']}[/]  intent: {_intent(r) or '-'}  client: {_client(r, True) or '-'}"
                  f"  materialized: {made}")
    if r["waiting"]:
        console.print(f"[yellow]waiting:[/] {escape(r['waiting'])}")
    console.print("audit:")
    for a in r["audit"]:
        detail = json.dumps(a["detail"], ensure_ascii=False, default=str) if a["detail"] else ""
        console.print(f"  {a['at'][:19]}  {a['event']}  {escape(detail)}", soft_wrap=True)
    if a := r.get("approval"):
        decided = f", {a['decided_by']} at {str(a['decided_at'])[:19]}" if a["decided_at"] else \
            f", expires {str(a['expires_at'])[:19]}"
        console.print(f"approval ({escape(a['rule'])}): {a['status']}{escape(decided)}"
                      + (f"; note: {escape(a['note'])}" if a["note"] else ""), soft_wrap=True)
    if v := r.get("recap_verdict"):
        console.print(f"recap verdict: {v['verdict']}" + (f"; note: {escape(v['note'])}" if v["note"] else ""),
                      soft_wrap=True)
    for launch in r["launches"]:
        console.print(f"launch #{launch['id']} attempt {launch['attempt']}: {launch['status']}"
                      f" ({launch['stop_reason'] or '-'}), model {launch['model']}, cost {launch['cost_usd']},"
                      f" session {launch['session_id'] or '-'}", soft_wrap=True)
        if launch.get("lesson_ids"):
            console.print(f"  lessons given: {', '.join(f'#{i}' for i in launch['lesson_ids'])}"
                          " (`synedre lessons` shows them)", soft_wrap=True)
        for key in ("contract", "salvage"):
            if launch.get(key):
                console.print(f"  {key}: {escape(json.dumps(launch[key], ensure_ascii=False, default=str))}",
                              soft_wrap=True)


def _dkim(r: dict) -> str:
    """pass, unsigned, or fail with its reason; `not checked` for mail never parsed."""
    if r["dkim"] == "fail":
        return f"fail ({r['dkim_reason']})"
    return r["dkim"] or "not checked"


def _intent(r: dict) -> str:
    if not r["intent"]:
        return ""
    return f"{r['intent']}/{r['complexity']} {r['confidence']:.2f}" if r["confidence"] is not None else r["intent"]


def _client(r: dict, source: bool) -> str:
    if not r["client"]:
        return ""
    codename = r["client"]["codename"] or "no client"
    return f"{codename} ({r['client']['source']})" if source else codename


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


def retry(
    message: str | None = typer.Argument(None, help="Message-ID header value or internal id"),
    from_stage: str | None = typer.Option(None, "--from", help=f"Stage to re-run: {', '.join(RETRY_STAGES)}"
                                                              " (default: the one whose failure it is in)"),
    status: Annotated[Status | None, typer.Option("--status", help="Every message at this status")] = None,
    since: str | None = typer.Option(None, help="With --status: only those there since (30m, 2h, 1d or an ISO date)"),
    reason: str = typer.Option(..., "--reason", help="Why, for the audit"),
) -> None:
    """Send messages back to a stage and enqueue them (audited `retry_requested`; one already
    at the stage's entry status is only enqueued again, audited `retry_requeued`)."""
    from synedre import db
    from synedre.db import messages

    if bool(message) == bool(status):
        fail("give a MESSAGE or --status STATUS", USAGE)
    if from_stage is not None and from_stage not in RETRY_STAGES:
        fail(f"--from {from_stage!r} is not a stage (stages: {', '.join(RETRY_STAGES)})", USAGE)
    after = _since(since)
    need_database()
    with db.transaction() as conn:
        if message:
            found = messages.lookup(conn, message)
            if found is None:
                fail(f"no message {message!r}")
            ids = [found]
        else:
            ids = messages.at_status(conn, str(status), after)
    if not ids:
        console.print(f"no message at {status}")
    sent = [_retry_one(mid, from_stage, reason) for mid in ids]  # one failure does not stop the batch
    if ids and not any(sent):
        raise typer.Exit(FAILED)


def _retry_one(mid: int, from_stage: str | None, reason: str) -> bool:
    """Send one message back and hand it to Celery, saying exactly what happened; False when
    it was refused or failed (nothing changed)."""
    from synedre import db, runner
    from tasks.app import enqueue

    try:
        with db.transaction() as conn:
            stage, old = runner.reenter(conn, mid, from_stage, reason=reason, by=operator())
    except runner.RetryRefused as exc:
        err.print(f"[bold red]refused:[/] message {mid}: {escape(str(exc))}")
        return False
    except Exception as exc:
        err.print(f"[bold red]failed:[/] message {mid}: {escape(explain(exc)[1])}")
        return False
    moved = f"already at {old}" if old in stage.entry else f"{old} -> {stage.entry[0]}"
    try:
        queued = enqueue(stage.name, mid)
    except Exception as exc:  # the move is committed: say so, and who hands it on
        why = explain(exc)[1]
        with db.transaction() as conn:
            runner.set_waiting(conn, mid, f"enqueue pending: {why}")
        every = get_settings().sweep_every_s
        console.print(f"message {mid}: {moved}; enqueue pending: {escape(why)}. The sweep enqueues it for"
                      f" {stage.name} once Redis answers (every {every:g} s, for a message waiting over"
                      f" {stage.stuck_after_s} s)", soft_wrap=True)
        return True
    console.print(f"message {mid}: {moved}, " + (f"enqueued for {stage.name}" if queued
                                                  else f"already queued for {stage.name}"))
    return True


def _since(value: str | None) -> datetime | None:
    from datetime import timedelta

    if value is None:
        return None
    units = {"m": "minutes", "h": "hours", "d": "days"}
    if value[:-1].isdigit() and value[-1] in units:
        return datetime.now(UTC) - timedelta(**{units[value[-1]]: int(value[:-1])})
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        fail(f"--since {value!r}: give 30m, 2h, 1d or an ISO date", USAGE)
