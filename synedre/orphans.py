"""Is an unacknowledged task orphaned (its worker died), or still being worked on?"""
from __future__ import annotations

import ast
from typing import Any

from synedre.config import get_settings
from synedre.pipeline import BY_NAME


def _message_id(headers: dict[str, Any]) -> int | None:
    argsrepr = headers.get("argsrepr") or ""
    try:
        args = ast.literal_eval(argsrepr)
    except (ValueError, SyntaxError):
        return None
    if isinstance(args, (list, tuple)) and args and isinstance(args[0], int):
        return args[0]
    return None


def is_orphan(headers: dict[str, Any]) -> bool:
    """A stage task is orphaned unless its message's claim (or launch lock) is alive."""
    from synedre import db, kv
    from synedre.spawn.locks import MessageLock

    task = (headers.get("task") or "").removeprefix("synedre.")
    mid = _message_id(headers)
    if task not in BY_NAME or mid is None:
        return True  # poll and housekeeping tasks tolerate running twice
    if task == "spawn":
        return MessageLock(kv.client(), str(mid)).holder() is None
    stage = BY_NAME[task]
    with db.transaction() as conn:
        row = conn.execute("SELECT status = %s AND claimed_at > now() - make_interval(secs => %s) AS live"
                           " FROM synedre.email_states WHERE message_id = %s",
                           (str(stage.running), get_settings().claim_lease_s, mid)).fetchone()
    return not (row and row["live"])
