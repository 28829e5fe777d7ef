"""SQL for launches: the launch row, fenced writes, batched events (SPEC §8, §12b).

The claim (synedre/runner/doors.py `claim_launch`) is a conditional UPDATE of the message
returning a new attempt number; every later write of that launch names the attempt and
is refused once a newer claim exists, so a launch that lost its lock (or a zombie
worker) cannot overwrite its successor.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from synedre.db.messages import audit
from synedre.db.types import Conn, FencedOut
from synedre.pipeline import LaunchStatus, Status

LAUNCHABLE = ("run", "question", "negociation", "conseil")
# the audit events of a launch (the last is named after the status a failed launch writes)
SPAWN_EVENTS = ("spawn_started", "spawn_action_done", str(Status.SPAWN_FAILED))
RECENT = "1 hour"
# An operator's `synedre retry` lifts the one-hour guard: only launches after it count.
_LAST_RETRY = ("coalesce((SELECT max(r.id) FROM synedre.audit_log r WHERE r.message_id = s.message_id"
               " AND r.event = 'retry_requested'), 0)")


@dataclass(frozen=True)
class LaunchClaim:
    message_id: int
    attempt: int
    launch_id: int


# What makes a materialized message launchable (the selection and the claim say it once):
# a launchable intent, exactly one materialized item, and no launch in the last hour
# unless an operator retried it since.
LAUNCHABLE_SQL = f"""s.intent = ANY(%(intents)s)
   AND num_nonnulls(s.run_id, s.question_id, s.negotiation_id, s.advice_id) = 1
   AND NOT EXISTS (SELECT 1 FROM synedre.audit_log a WHERE a.message_id = s.message_id
                     AND a.event = ANY(%(events)s) AND a.at > now() - interval '{RECENT}'
                     AND a.id > {_LAST_RETRY})"""
LAUNCHABLE_ARGS = {"intents": list(LAUNCHABLE), "events": list(SPAWN_EVENTS)}


def selectable(conn: Conn, limit: int = 50) -> list[int]:
    """Messages the launch stage would take now (SPEC §8 selection)."""
    return [r["message_id"] for r in conn.execute(
        f"""SELECT s.message_id FROM synedre.email_states s
             WHERE s.status = %(at)s AND {LAUNCHABLE_SQL} ORDER BY s.status_at LIMIT %(limit)s""",
        {"at": str(Status.MATERIALIZED), "limit": limit, **LAUNCHABLE_ARGS})]


# Held by a launch's claim transaction while it counts the launches running and claims, so
# that two claims never both see the last free place.
CLAIMS_LOCK = 0x5359_4E4C  # pg_advisory_xact_lock key, "SYNL"


def running(conn: Conn) -> int:
    """The launches running now by PostgreSQL's account (claimed, not finished), counted
    under CLAIMS_LOCK, which stays held until the caller's transaction ends: a claim written
    in it is counted by the next caller. Unlike Redis's slots, this count survives a broker
    that lost its data while launches ran."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (CLAIMS_LOCK,))
    row = conn.execute(
        """SELECT count(*) AS n FROM synedre.launches l
             JOIN synedre.email_states s ON s.message_id = l.message_id AND s.launch_attempt = l.attempt
            WHERE l.status = %s AND s.status = %s""", (str(LaunchStatus.RUNNING), str(Status.SPAWNING))).fetchone()
    return int(row["n"]) if row else 0


def insert(conn: Conn, message_id: int, attempt: int, **launch: Any) -> LaunchClaim:
    """The launch's row and its `spawn_started` audit, for the claim that took `attempt`."""
    cols = ["message_id", "attempt", *launch]
    inserted = conn.execute(
        f"INSERT INTO synedre.launches ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))}) RETURNING id",
        (message_id, attempt, *[Jsonb(v) if isinstance(v, dict) else v for v in launch.values()]),
    ).fetchone()
    assert inserted is not None  # INSERT … RETURNING without ON CONFLICT always returns its row
    audit(conn, message_id, "spawn_started", attempt=attempt, launch_id=inserted["id"],
          iteration=launch.get("iteration"))
    return LaunchClaim(message_id, attempt, inserted["id"])


def _fence(conn: Conn, c: LaunchClaim) -> None:
    ok = conn.execute("SELECT 1 FROM synedre.email_states WHERE message_id = %s AND launch_attempt = %s"
                      " FOR SHARE", (c.message_id, c.attempt)).fetchone()
    if ok is None:
        raise FencedOut(f"message {c.message_id}: attempt {c.attempt} was superseded")


def update(conn: Conn, c: LaunchClaim, **fields: Any) -> None:
    """A fenced write to this launch's row (session id, cost, contract, salvage...)."""
    _fence(conn, c)
    sets = ", ".join(f"{k} = %({k})s" for k in fields)
    conn.execute(f"UPDATE synedre.launches SET {sets} WHERE id = %(id)s",
                 {"id": c.launch_id, **{k: Jsonb(v) if isinstance(v, (dict, list)) else v
                                         for k, v in fields.items()}})


def record_cost(conn: Conn, c: LaunchClaim, usd: float | None) -> float:
    """What the launch's session has cost so far (the CLI's running total: it counts the
    session's earlier runs in), fenced; never lowered, so that a run that reports nothing
    keeps what an earlier one recorded (`usd` None: nothing new). Returns the launch's cost now."""
    _fence(conn, c)
    row = conn.execute("UPDATE synedre.launches SET cost_usd = greatest(cost_usd, %s) WHERE id = %s"
                       " RETURNING coalesce(cost_usd, 0) AS usd", (usd, c.launch_id)).fetchone()
    return float(row["usd"]) if row else 0.0


def add_events(conn: Conn, c: LaunchClaim, first_seq: int,
               events: Iterable[tuple[str, str | None, str | None, dict]]) -> int:
    """Append (type, subtype, tool, payload) rows from `first_seq`; returns the next seq.
    A batch whose seqs are all past the launch's last stored one (every batch of a stream
    written once) is COPYed straight into the table; one that may repeat stored rows (a
    write tried again after a commit whose answer was lost, a resumed stream) goes through a
    staging table and `ON CONFLICT DO NOTHING`: each (launch, seq) is stored once either way.
    A payload that carries its JSON text (`json_text`, as `spawn.stream.Decoded` does: the
    line it was decoded from, which redaction left as it was) is stored from that text,
    not encoded again."""
    batch = list(events)
    # The fence and the launch's last seq in one round trip: the row lock is the fence's.
    row = conn.execute("SELECT (SELECT max(seq) FROM synedre.launch_events WHERE launch_id = %s) AS last"
                       " FROM synedre.email_states WHERE message_id = %s AND launch_attempt = %s FOR SHARE",
                       (c.launch_id, c.message_id, c.attempt)).fetchone()
    if row is None:
        raise FencedOut(f"message {c.message_id}: attempt {c.attempt} was superseded")
    if not batch:
        return first_seq
    fresh = row["last"] is None or row["last"] < first_seq
    if not fresh:
        # A per-transaction staging table, then one INSERT from it that skips what is stored.
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS launch_events_in (LIKE synedre.launch_events"
                     " INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
    table = "synedre.launch_events" if fresh else "launch_events_in"
    with conn.cursor().copy(f"COPY {table} ({_EVENT_COLUMNS}) FROM STDIN") as copy:
        for n, (t, st, tn, p) in enumerate(batch, first_seq):
            copy.write_row((c.launch_id, n, t, st, tn, json.dumps(p) if type(p) is dict else _json_text(p)))
    if not fresh:
        conn.execute(f"INSERT INTO synedre.launch_events ({_EVENT_COLUMNS}) SELECT {_EVENT_COLUMNS}"
                     " FROM launch_events_in ON CONFLICT DO NOTHING")
    return first_seq + len(batch)


_EVENT_COLUMNS = "launch_id, seq, event_type, subtype, tool_name, payload"


def _json_text(payload: Any) -> str:
    text = getattr(payload, "json_text", None)
    return text if isinstance(text, str) else json.dumps(payload)


def next_seq(conn: Conn, launch_id: int) -> int:
    """Where the launch's stream goes on (a resumed launch)."""
    row = conn.execute("SELECT coalesce(max(seq) + 1, 0) AS n FROM synedre.launch_events WHERE launch_id = %s",
                       (launch_id,)).fetchone()
    return int(row["n"]) if row else 0


def latest(conn: Conn, message_id: int) -> dict[str, Any] | None:
    """The message's last launch row."""
    return conn.execute("SELECT * FROM synedre.launches WHERE message_id = %s ORDER BY attempt DESC LIMIT 1",
                        (message_id,)).fetchone()


def status_of(conn: Conn, launch_id: int) -> str:
    row = conn.execute("SELECT status FROM synedre.launches WHERE id = %s", (launch_id,)).fetchone()
    assert row is not None  # a launch row is never deleted
    return str(row["status"])


def events_after(conn: Conn, launch_id: int, seq: int) -> list[dict[str, Any]]:
    """The launch's stream events after `seq`, in order (what `synedre tail` follows)."""
    return conn.execute("SELECT seq, event_type, subtype, tool_name, payload FROM synedre.launch_events"
                        " WHERE launch_id = %s AND seq > %s ORDER BY seq", (launch_id, seq)).fetchall()
