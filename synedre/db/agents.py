"""SQL for the agents' rows by codename (the roster's queries are synedre/agents.py's)."""
from __future__ import annotations

from synedre.db.types import Conn


def agent_id(conn: Conn, codename: str, *, active: bool = False) -> int | None:
    """The agent's id; None when there is no such agent (or, with `active`, it is retired)."""
    row = conn.execute("SELECT id FROM synedre.agents WHERE codename = %s AND (active OR NOT %s)",
                       (codename, active)).fetchone()
    return int(row["id"]) if row else None
