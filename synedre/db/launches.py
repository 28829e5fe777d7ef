"""SQL for launches: the exactly-once claim, fenced writes, batched events (SPEC §8, §12b).

The claim is a conditional UPDATE returning a new attempt number; every later write of
that launch names the attempt and is refused once a newer claim exists, so a launch
that lost its lock (or a zombie worker) cannot overwrite its successor.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from synedre.db.messages import audit
from synedre.db.types import Conn

LAUNCHABLE = ("run", "question", "negociation", "conseil")
SPAWN_EVENTS = ("spawn_started", "spawn_action_done", "spawn_failed")
RECENT = "1 hour"
# An operator's `synedre retry` lifts the one-hour guard: only launches after it count.
_LAST_RETRY = ("coalesce((SELECT max(r.id) FROM synedre.audit_log r WHERE r.message_id = s.message_id"
               " AND r.event = 'retry_requested'), 0)")


class FencedOut(RuntimeError):
    """A newer claim owns this message: this launch must stop writing."""


@dataclass(frozen=True)
class Claim:
    message_id: int
    attempt: int
    launch_id: int


def selectable(conn: Conn, limit: int = 50) -> list[int]:
    """Messages the launch stage would take now (SPEC §8 selection)."""
    return [r["message_id"] for r in conn.execute(
        f"""SELECT s.message_id FROM synedre.email_states s
             WHERE s.status = 'materialized' AND s.intent = ANY(%s)
               AND num_nonnulls(s.run_id, s.question_id, s.negotiation_id, s.advice_id) = 1
               AND NOT EXISTS (SELECT 1 FROM synedre.audit_log a WHERE a.message_id = s.message_id
                                 AND a.event = ANY(%s) AND a.at > now() - interval '{RECENT}'
                                 AND a.id > {_LAST_RETRY})
             ORDER BY s.status_at LIMIT %s""", (list(LAUNCHABLE), list(SPAWN_EVENTS), limit))]


def claim(conn: Conn, message_id: int, *, iteration: int = 1, **launch: Any) -> Claim | None:
    """Take the message for one launch, in the caller's transaction; None if not launchable.
    A first launch comes from `materialized` (no launch in the last hour unless an operator
    retried it); iteration n > 1 comes from `qa_failed`, after exactly n - 1 launches."""
    if iteration > 1:
        row = conn.execute(
            """UPDATE synedre.email_states s
                   SET status = 'spawning', launch_attempt = s.launch_attempt + 1,
                       updated_at = now(), status_at = now(), claimed_at = now(),
                       waiting_reason = NULL, waiting_until = NULL
                 WHERE s.message_id = %s AND s.status = 'qa_failed'
                   AND (SELECT count(*) FROM synedre.launches l WHERE l.message_id = s.message_id) = %s
                RETURNING s.launch_attempt""", (message_id, iteration - 1)).fetchone()
    else:
        row = conn.execute(
            f"""UPDATE synedre.email_states s
                   SET status = 'spawning', launch_attempt = s.launch_attempt + 1,
                       updated_at = now(), status_at = now(), claimed_at = now(),
                       waiting_reason = NULL, waiting_until = NULL
                 WHERE s.message_id = %s AND s.status = 'materialized' AND s.intent = ANY(%s)
                   AND num_nonnulls(s.run_id, s.question_id, s.negotiation_id, s.advice_id) = 1
                   AND NOT EXISTS (SELECT 1 FROM synedre.audit_log a WHERE a.message_id = s.message_id
                                     AND a.event = ANY(%s) AND a.at > now() - interval '{RECENT}'
                                     AND a.id > {_LAST_RETRY})
                RETURNING s.launch_attempt""", (message_id, list(LAUNCHABLE), list(SPAWN_EVENTS))).fetchone()
    launch = {**launch, "iteration": iteration}
    if row is None:
        return None
    cols = ["message_id", "attempt", *launch]
    inserted = conn.execute(
        f"INSERT INTO synedre.launches ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))}) RETURNING id",
        (message_id, row["launch_attempt"], *[Jsonb(v) if isinstance(v, dict) else v for v in launch.values()]),
    ).fetchone()
    assert inserted is not None  # INSERT … RETURNING without ON CONFLICT always returns its row
    launch_id = inserted["id"]
    audit(conn, message_id, "spawn_started", attempt=row["launch_attempt"], launch_id=launch_id, iteration=iteration)
    return Claim(message_id, row["launch_attempt"], launch_id)


def _fence(conn: Conn, c: Claim) -> None:
    ok = conn.execute("SELECT 1 FROM synedre.email_states WHERE message_id = %s AND launch_attempt = %s"
                      " FOR SHARE", (c.message_id, c.attempt)).fetchone()
    if ok is None:
        raise FencedOut(f"message {c.message_id}: attempt {c.attempt} was superseded")


def update(conn: Conn, c: Claim, **fields: Any) -> None:
    """A fenced write to this launch's row (session id, cost, contract, salvage...)."""
    _fence(conn, c)
    sets = ", ".join(f"{k} = %({k})s" for k in fields)
    conn.execute(f"UPDATE synedre.launches SET {sets} WHERE id = %(id)s",
                 {"id": c.launch_id, **{k: Jsonb(v) if isinstance(v, (dict, list)) else v
                                         for k, v in fields.items()}})


def add_events(conn: Conn, c: Claim, first_seq: int,
               events: Iterable[tuple[str, str | None, str | None, dict]]) -> int:
    """Append (type, subtype, tool, payload) rows from `first_seq`; returns the next seq.
    One statement per batch (arrays unnested server-side), not one per row: a long stream
    persists at a fraction of COPY's cost instead of a round trip per event."""
    _fence(conn, c)
    batch = list(events)
    if not batch:
        return first_seq
    # COPY into a per-transaction staging table (psycopg's copy is C-accelerated; the
    # arrays of one unnest statement were adapted in Python), then one INSERT from it.
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS launch_events_in (LIKE synedre.launch_events"
                 " INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
    with conn.cursor().copy("COPY launch_events_in (launch_id, seq, event_type, subtype, tool_name, payload)"
                            " FROM STDIN") as copy:
        for n, (t, st, tn, p) in enumerate(batch):
            copy.write_row((c.launch_id, first_seq + n, t, st, tn, json.dumps(p)))
    conn.execute("INSERT INTO synedre.launch_events (launch_id, seq, event_type, subtype, tool_name, payload)"
                 " SELECT launch_id, seq, event_type, subtype, tool_name, payload FROM launch_events_in"
                 " ON CONFLICT DO NOTHING")
    return first_seq + len(batch)


def finish(conn: Conn, c: Claim, *, ok: bool, status: str, reason: str, outcome: str | None = None,
           **fields: Any) -> None:
    """End the launch: its row, the message's status and the audit, fenced, in one transaction.
    `outcome`: the launch row's status when it is neither `succeeded` nor `failed`
    (`sandbox_unavailable`, `merge_failed`)."""
    update(conn, c, status=outcome or ("succeeded" if ok else "failed"), stop_reason=reason, ended_at="now",
           **fields)
    conn.execute("UPDATE synedre.email_states SET status = %s, updated_at = now(), status_at = now(),"
                 " claimed_at = NULL"
                 " WHERE message_id = %s AND launch_attempt = %s", (str(status), c.message_id, c.attempt))
    audit(conn, c.message_id, "spawn_action_done" if ok else "spawn_failed",
          attempt=c.attempt, launch_id=c.launch_id, reason=reason)
