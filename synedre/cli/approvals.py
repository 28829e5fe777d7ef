"""`synedre approvals`, `approve` and `refuse`: the launches waiting for the founder's OK, and
the operator's decision in his place."""
from __future__ import annotations

import json
import sys

import typer

from synedre.cli.common import console, fail, listing, need_database, operator
from synedre.pipeline import Status


def approvals(as_json: bool = typer.Option(False, "--json", help="Machine-readable output"),
              wide: bool = typer.Option(False, "--wide", help="Long text whole (folded)")) -> None:
    """Launches waiting for the founder's OK: the message, the rule that asked, age, expiry."""
    from synedre import db
    from synedre.db import approvals as sql

    need_database()
    with db.transaction() as conn:
        rows = sql.waiting(conn)
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    listing([{"message": str(r["message_id"]), "age": f"{r['age_s'] // 60} min", "rule": r["rule"],
              "expires": str(r["expires_at"])[:16], "subject": r["subject"] or ""} for r in rows],
            whole=("message", "age", "expires"), wide=wide, empty="no request waits")


def approve(message: str = typer.Argument(..., help="Message-ID header value or internal id")) -> None:
    """Release a launch waiting for the founder's OK, as he would by replying OK (audited with
    your OS user), and hand it to the spawn queue."""
    decide(message, approve=True, reason=None)


def refuse(message: str = typer.Argument(..., help="Message-ID header value or internal id"),
           reason: str = typer.Option(..., "--reason", help="Why: kept as the note, shown by inspect")) -> None:
    """End a message waiting for the founder's OK as `refused`, with the reason (audited)."""
    decide(message, approve=False, reason=reason)


def decide(message: str, *, approve: bool, reason: str | None) -> None:
    from synedre import db
    from synedre.approvals import decisions
    from synedre.db import messages
    from tasks.app import enqueue

    need_database()
    by = f"operator:{operator()}"
    with db.transaction() as conn:
        mid = messages.lookup(conn, message)
        if mid is None:
            fail(f"no message {message!r}")
        why = decisions.decide(conn, mid, approve=approve, by=by, note=reason)
        stage = decisions.released_stage(conn, mid)
    if why is not None:
        fail(f"message {mid}: nothing decided ({why.replace('_', ' ')})")
    if approve:
        enqueue(stage, mid)
    else:  # the reason becomes a lesson; if Redis cannot take it now, the sweep offers it later
        try:
            enqueue("learn", mid)
        except Exception as exc:  # noqa: BLE001 - the refusal stands; its lesson is the sweep's then
            console.print(f"the reason is learnt later ({type(exc).__name__})")
    done = f"approved, handed to {stage}" if approve else str(Status.REFUSED)
    console.print(f"message {mid}: {done} (by {by})")
