"""SQL for what a launch changed (issue 28): written with the launch's verdict, read by the
recap (with the patch) and by a follow-up's approval request (without it)."""
from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from synedre.db.types import Conn, Row

_JSON = ("commits", "files", "left_out")
_COLUMNS = ("branch", "base_sha", "head_sha", "commits", "files", "patch", "patch_bytes", "left_out", "altered",
            "has_binary")


def record(conn: Conn, launch_id: int, changes: dict[str, Any]) -> None:
    """The launch's changes (`spawn.changes.Changes.as_record`), once per launch: a launch
    concluded again (resumed by hand) replaces them."""
    values = [Jsonb(changes[k]) if k in _JSON else changes[k] for k in _COLUMNS]
    conn.execute(f"INSERT INTO synedre.launch_changes (launch_id, {', '.join(_COLUMNS)})"
                 f" VALUES (%s, {', '.join(['%s'] * len(_COLUMNS))}) ON CONFLICT (launch_id) DO UPDATE SET "
                 + ", ".join(f"{k} = EXCLUDED.{k}" for k in _COLUMNS), (launch_id, *values))


def of_message(conn: Conn, message_id: int, *, patch: bool = True) -> list[Row]:
    """The changes of each of the message's launches that changed something, oldest first
    (a launch per QA iteration), with the launch's iteration."""
    cols = ", ".join(f"c.{k}" for k in _COLUMNS if patch or k != "patch")
    return list(conn.execute(
        f"SELECT c.launch_id, l.iteration, {cols} FROM synedre.launch_changes c"
        " JOIN synedre.launches l ON l.id = c.launch_id WHERE l.message_id = %s ORDER BY c.launch_id",
        (message_id,)))
