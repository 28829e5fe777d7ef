"""SQL shared by the stages: lock a message's state row, move it, read its directory."""
from __future__ import annotations

from typing import Any

import psycopg

from synedre.classify.resolution import Client, Directory
from synedre.db.messages import audit


def lock(conn: psycopg.Connection, message_id: int, status: str) -> dict[str, Any] | None:
    """The state row joined with its raw message, locked for this transaction, if the
    message is at `status`.

    None when it is not (the stage's work is done, or not yet due), or when another
    worker holds it right now (a duplicate task): nothing to do here either way.
    """
    return conn.execute(
        """SELECT s.*, r.mailbox, r.message_id AS message_id_header, r.envelope_from,
                  r.subject, r.dkim_pass, r.raw
             FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id
            WHERE s.message_id = %s AND s.status = %s FOR UPDATE OF s SKIP LOCKED""",
        (message_id, status)).fetchone()


def transition(conn: psycopg.Connection, message_id: int, status: str, event: str,
               detail: dict[str, Any] | None = None, **fields: Any) -> None:
    """A status change and its audit row, in the caller's transaction."""
    sets = "".join(f", {k} = %({k})s" for k in fields)
    conn.execute(f"UPDATE synedre.email_states SET status = %(status)s, updated_at = now(),"
                 f" status_at = CASE WHEN status = %(status)s THEN status_at ELSE now() END{sets}"
                 " WHERE message_id = %(id)s", {"status": status, "id": message_id, **fields})
    audit(conn, message_id, event, **(detail or {}))


def has_audit(conn: psycopg.Connection, message_id: int, event: str) -> bool:
    return conn.execute("SELECT 1 FROM synedre.audit_log WHERE message_id = %s AND event = %s LIMIT 1",
                        (message_id, event)).fetchone() is not None


def attachments(conn: psycopg.Connection, message_id: int) -> list[dict[str, Any]]:
    return conn.execute("SELECT * FROM synedre.attachments WHERE message_id = %s ORDER BY idx",
                        (message_id,)).fetchall()


def load_directory(conn: psycopg.Connection) -> Directory:
    founder = conn.execute("SELECT emails, domain, atlas_address FROM synedre.founder").fetchone()
    clients = {r["codename"]: Client(r["id"], r["codename"], r["name"], r["priority"], float(r["mrr"]),
                                     r["status"], tuple(r["domains"]))
               for r in conn.execute("SELECT * FROM synedre.clients")}
    by_id = {c.id: c.codename for c in clients.values()}
    persons = {r["email"]: by_id[r["client_id"]]
               for r in conn.execute("SELECT email, client_id FROM synedre.client_persons")}
    if founder is None:
        return Directory(frozenset(), "", "", clients, persons)
    return Directory(frozenset(founder["emails"]), founder["domain"], founder["atlas_address"],
                     clients, persons)
