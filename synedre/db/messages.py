"""SQL for the message aggregate: raw bytes, state row, attachments, audit log."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from synedre.db.types import Conn
from synedre.pipeline import Status


@dataclass(frozen=True)
class NewMessage:
    mailbox: str
    uidvalidity: int
    uid: int
    message_id: str
    synthetic_id: bool
    envelope_from: str | None
    subject: str | None
    headers: list[tuple[str, str]]
    raw: bytes
    dkim_pass: bool
    status: Status  # received | parse_failed
    attachments_dir: str | None
    attachments: list[dict[str, Any]]
    audits: list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Existing:
    id: int
    status: str
    same_uid: bool  # the very same IMAP delivery seen again (a retried poll)


def audit(conn: Conn, message_id: int | None, event: str, **detail: Any) -> None:
    conn.execute("INSERT INTO synedre.audit_log (message_id, event, detail) VALUES (%s, %s, %s)",
                  (message_id, event, Jsonb(detail)))


def insert_raw(conn: Conn, m: NewMessage) -> int | None:
    """The raw row, in the caller's transaction (its state row is the stage runner's, then
    `insert_parts`). Returns the new id, or None when the message is already stored: the
    unique constraints decide, so concurrent polls cannot both insert it."""
    row = conn.execute(
        """INSERT INTO synedre.raw_messages
             (mailbox, uidvalidity, uid, message_id, message_id_synthetic, envelope_from,
              subject, headers, raw, size, dkim_pass)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT DO NOTHING RETURNING id""",
        (m.mailbox, m.uidvalidity, m.uid, m.message_id, m.synthetic_id, m.envelope_from,
         m.subject, Jsonb(m.headers), m.raw, len(m.raw), m.dkim_pass),
    ).fetchone()
    return row["id"] if row else None


def insert_parts(conn: Conn, mid: int, m: NewMessage) -> None:
    """The attachments' rows and the ingestion's audit rows of a message just admitted."""
    if m.attachments:
        with conn.cursor() as cur:
            cur.executemany(
                """INSERT INTO synedre.attachments
                     (message_id, idx, filename, content_type, size, sha256, stored_name)
                   VALUES (%(mid)s, %(idx)s, %(filename)s, %(content_type)s, %(size)s,
                           %(sha256)s, %(stored_name)s)""",
                [{**a, "mid": mid} for a in m.attachments])
    for event, detail in m.audits:
        audit(conn, mid, event, **detail)


def find_existing(conn: Conn, mailbox: str, uidvalidity: int, uid: int,
                  message_id: str) -> Existing | None:
    row = conn.execute(
        """SELECT r.id, s.status, (r.uidvalidity = %s AND r.uid = %s) AS same_uid
             FROM synedre.raw_messages r JOIN synedre.email_states s ON s.message_id = r.id
            WHERE r.mailbox = %s AND ((r.uidvalidity = %s AND r.uid = %s) OR r.message_id = %s)
            ORDER BY same_uid DESC LIMIT 1""",
        (uidvalidity, uid, mailbox, uidvalidity, uid, message_id)).fetchone()
    return Existing(row["id"], row["status"], row["same_uid"]) if row else None


def lookup(conn: Conn, ref: str) -> int | None:
    """A message by internal id or by Message-ID header value (brackets optional)."""
    if ref.isdigit():
        row = conn.execute("SELECT id FROM synedre.raw_messages WHERE id = %s", (int(ref),)).fetchone()
        if row:
            return row["id"]
    bare = ref.strip().strip("<>")
    row = conn.execute(
        "SELECT id FROM synedre.raw_messages WHERE message_id IN (%s, %s) ORDER BY id LIMIT 1",
        (f"<{bare}>", bare)).fetchone()
    return row["id"] if row else None


def status_of(conn: Conn, message_id: int) -> str | None:
    row = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (message_id,)).fetchone()
    return row["status"] if row else None


def at_status(conn: Conn, status: str, since: Any = None) -> list[int]:
    """Messages at `status` (since a time, if given), oldest first."""
    return [r["message_id"] for r in conn.execute(
        "SELECT message_id FROM synedre.email_states WHERE status = %s AND (%s::timestamptz IS NULL"
        " OR status_at >= %s) ORDER BY status_at", (status, since, since))]


LAUNCH_FIELDS = ("id", "attempt", "status", "model", "system_prompt", "session_id", "num_turns", "cost_usd",
                 "exit_code", "stop_reason", "started_at", "ended_at", "contract", "salvage", "branch",
                 "prompt_version", "approval_id", "lesson_ids")


def launches_of(conn: Conn, message_id: int | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Launches with their contract, verdict, salvage and merge result, newest first."""
    rows = conn.execute(
        "SELECT l.*, l.message_id FROM synedre.launches l WHERE %(all)s OR l.message_id = %(m)s"
        " ORDER BY l.id DESC LIMIT %(n)s", {"all": message_id is None, "m": message_id, "n": limit}).fetchall()
    return [{"message_id": r["message_id"], **{k: r.get(k) for k in LAUNCH_FIELDS},
             "merge": (r.get("salvage") or {}).get("merge")} for r in rows]


# A message's DKIM outcome as an operator tells them apart: `pass`, `unsigned` (no signature
# at all, as most mail), `fail` (a signature that does not hold, or not the From: domain's),
# or NULL when it was never checked (parse_failed). The reason is the poll's audit's.
DKIM_REASON_SQL = ("(SELECT a.detail->>'dkim' FROM synedre.audit_log a"
                   " WHERE a.message_id = r.id AND a.event = 'poll_inserted' ORDER BY a.id LIMIT 1)")
DKIM_SQL = (f"CASE WHEN r.dkim_pass THEN 'pass' WHEN {DKIM_REASON_SQL} = 'unsigned' THEN 'unsigned'"
            f" WHEN {DKIM_REASON_SQL} IS NOT NULL THEN 'fail' END")


def dkim_counts(conn: Conn) -> dict[str, int]:
    """Messages per DKIM outcome (pass, fail, unsigned), zero included."""
    counts = {"pass": 0, "fail": 0, "unsigned": 0}
    counts.update({r["dkim"]: r["n"] for r in conn.execute(
        f"SELECT {DKIM_SQL} AS dkim, count(*) AS n FROM synedre.raw_messages r GROUP BY 1") if r["dkim"]})
    return counts


def describe(conn: Conn, ids: list[int] | None = None, details: bool = False) -> list[dict[str, Any]]:
    """What `synedre inspect` shows, one dict per message, in arrival order; `details`
    adds every audit row (time, event, detail) and the launches."""
    rows = conn.execute(
        f"""SELECT r.id, r.message_id, r.subject, r.mailbox, r.envelope_from, r.dkim_pass,
                  {DKIM_SQL} AS dkim, {DKIM_REASON_SQL} AS dkim_reason,
                  r.received_at, s.status, s.intent, s.complexity, s.confidence, s.client_source,
                  s.waiting_reason, s.waiting_until, s.stage_attempt, s.status_at,
                  c.codename AS client, s.run_id, s.question_id, s.negotiation_id, s.advice_id,
                  ch.codename AS chantier,
                  COALESCE((SELECT array_agg(a.event ORDER BY a.id) FROM synedre.audit_log a
                             WHERE a.message_id = r.id), '{{}}') AS audits
             FROM synedre.raw_messages r
             JOIN synedre.email_states s ON s.message_id = r.id
             LEFT JOIN synedre.clients c ON c.id = s.client_id
             LEFT JOIN synedre.chantiers ch ON ch.id = s.chantier_id
            WHERE %(all)s OR r.id = ANY(%(ids)s)
            ORDER BY r.id""",
        {"all": ids is None, "ids": ids or []}).fetchall()
    out = []
    for r in rows:
        kinds = {"run": r["run_id"], "question": r["question_id"],
                 "negociation": r["negotiation_id"], "conseil": r["advice_id"]}
        kind = next((k for k, v in kinds.items() if v is not None), None)
        item = {
            "id": r["id"], "message_id": r["message_id"], "subject": r["subject"],
            "from": r["envelope_from"], "mailbox": r["mailbox"],
            "received_at": r["received_at"].isoformat(), "status": r["status"],
            "status_at": r["status_at"].isoformat(), "attempt": r["stage_attempt"],
            "waiting_reason": r["waiting_reason"],
            "waiting_until": r["waiting_until"].isoformat() if r["waiting_until"] else None,
            "dkim_pass": r["dkim_pass"], "dkim": r["dkim"], "dkim_reason": r["dkim_reason"],
            "intent": r["intent"], "complexity": r["complexity"],
            "confidence": r["confidence"],
            "client": {"codename": r["client"], "source": r["client_source"]}
            if r["client"] or r["client_source"] else None,
            "materialized": {"kind": kind, "id": kinds[kind]} if kind else None,
            "chantier": r["chantier"], "audits": list(r["audits"]),
        }
        if details:
            item["audit"] = [{"at": a["at"].isoformat(), "event": a["event"], "detail": a["detail"]}
                             for a in conn.execute("SELECT at, event, detail FROM synedre.audit_log"
                                                   " WHERE message_id = %s ORDER BY id", (r["id"],))]
            item["launches"] = launches_of(conn, r["id"])
            item["approval"] = conn.execute(
                """SELECT gate, rule, status, created_at, expires_at, decided_at, decided_by, decision_message_id,
                          note FROM synedre.approvals WHERE message_id = %s ORDER BY id DESC LIMIT 1""",
                (r["id"],)).fetchone()
            item["recap_verdict"] = conn.execute(
                "SELECT verdict, note, reply_message_id, decided_at FROM synedre.recap_verdicts WHERE message_id = %s",
                (r["id"],)).fetchone()
        out.append(item)
    return out


def attachments(conn: Conn, message_id: int) -> list[dict[str, Any]]:
    return conn.execute("SELECT * FROM synedre.attachments WHERE message_id = %s ORDER BY idx",
                        (message_id,)).fetchall()


def attachments_of(conn: Conn, state: dict[str, Any]) -> list[dict[str, Any]]:
    """A claimed message's attachment rows, not asked for when its claim counted none
    (`attachment_count`, synedre/runner/doors.py): most mail has none."""
    if state.get("attachment_count") == 0:
        return []
    return attachments(conn, state["message_id"])
