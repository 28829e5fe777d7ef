"""The outbox: one row of `synedre.outbound_mail` per (message, kind), and the only code that
writes its status (`OutboundStatus`), each transition a conditional UPDATE with its audit
row in the same transaction (SPEC §9.8). The send loop (synedre/mail/outbound.py) calls these
doors, each in a short transaction of its own, and no network call happens inside one.

drafting -> draft_saved -> sending -> sent, with `release` giving a claim back (nothing left
the mailbox) and `send_unknown` for a send that may have left: a connection lost during DATA
(`mark_unknown`) or a `sending` claim older than `SEND_LEASE_S` (found by `claim`). Only an
operator's `resolve_unknown` moves a `send_unknown` row on.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from synedre.db.types import Conn, Row
from synedre.mail.compose import Skipped, check_kind, message_ids
from synedre.mail.errors import FounderMissing, OutboundError, UnknownMessage
from synedre.pipeline import OutboundStatus

# A claim older than this is a dead caller's. Saving a draft is a few IMAP round trips;
# a send is an IMAP fetch plus an SMTP session, each step bounded by its socket timeout.
DRAFT_LEASE_S = 300.0
SEND_LEASE_S = 600.0

ConnFactory = Callable[[], AbstractContextManager[Conn]]


@dataclass(frozen=True)
class Context:
    founder_address: str
    founder_name: str
    atlas_address: str
    original_id: str | None       # None when the original had no Message-ID of its own
    references: tuple[str, ...]


def audit(conn: Conn, message_id: int, event: str, **detail: Any) -> None:
    conn.execute("INSERT INTO synedre.audit_log (message_id, event, detail) VALUES (%s, %s, %s)",
                 (message_id, event, Jsonb(detail)))


def founder(conn: Conn) -> Row:
    row = conn.execute("SELECT name, emails, atlas_address FROM synedre.founder").fetchone()
    if row is None or not row["emails"]:
        raise FounderMissing("no founder address in synedre.founder (synedre directory import)")
    return row


def context(conn: Conn, message_db_id: int) -> Context:
    who = founder(conn)
    original = conn.execute(
        "SELECT message_id, message_id_synthetic, headers FROM synedre.raw_messages WHERE id = %s",
        (message_db_id,)).fetchone()
    if original is None:
        raise UnknownMessage(f"no message {message_db_id}")
    refs = [i for name, value in original["headers"] if name.lower() == "references"
            for i in message_ids(value)]
    return Context(who["emails"][0], who["name"], who["atlas_address"],
                    None if original["message_id_synthetic"] else original["message_id"], tuple(refs))


_CLAIM_DRAFT = f"""
INSERT INTO synedre.outbound_mail AS o (message_id, kind, mailbox, rfc_message_id, status, claimed_at)
VALUES (%(mid)s, %(kind)s, %(mailbox)s, %(rfc)s, '{OutboundStatus.DRAFTING}', now())
ON CONFLICT (message_id, kind) DO UPDATE
   SET attempts = o.attempts + 1, claimed_at = now(), updated_at = now()
 WHERE o.status = '{OutboundStatus.DRAFTING}'
   AND (o.claimed_at IS NULL OR o.claimed_at < now() - make_interval(secs => %(lease)s))
RETURNING o.*"""

_STUCK_SENDING = f"""
UPDATE synedre.outbound_mail
   SET status = '{OutboundStatus.SEND_UNKNOWN}', updated_at = now(),
       error = 'the send claimed at ' || claimed_at || ' never finished: it may have left'
 WHERE message_id = %(mid)s AND kind = %(kind)s AND status = '{OutboundStatus.SENDING}'
   AND claimed_at < now() - make_interval(secs => %(lease)s)
RETURNING *"""


def claim(conn: Conn, message_db_id: int, kind: str, mailbox: str, rfc: str) -> tuple[Row, bool]:
    """The row, and whether this call now owns its `drafting` claim. A `sending` row past
    its lease becomes `send_unknown` here, with its audit row."""
    args = {"mid": message_db_id, "kind": kind, "mailbox": mailbox, "rfc": rfc,
            "lease": DRAFT_LEASE_S}
    try:
        with conn.transaction():  # a savepoint, for the race below
            row = conn.execute(_CLAIM_DRAFT, args).fetchone()
    except psycopg.errors.UniqueViolation:
        # Two first INSERTs passed the claim's conflict check at once: the second then fails on
        # the Message-ID's own unique index, which ON CONFLICT does not arbitrate. The first has
        # committed by now (the violation waits for it): the same claim finds its row.
        row = conn.execute(_CLAIM_DRAFT, args).fetchone()
    if row is not None:
        return row, True
    stuck = conn.execute(_STUCK_SENDING, {**args, "lease": SEND_LEASE_S}).fetchone()
    if stuck is not None:
        audit(conn, message_db_id, "mail_send_unknown", kind=kind, rfc_message_id=stuck["rfc_message_id"],
               attempt=stuck["attempts"], reason="stale_sending_claim")
        return stuck, False
    row = conn.execute("SELECT * FROM synedre.outbound_mail WHERE message_id = %s AND kind = %s",
                       (message_db_id, kind)).fetchone()
    assert row is not None  # the INSERT above conflicted with it
    return row, False


def draft_saved(conn: Conn, row: Row, folder: str, uidvalidity: int, uid: int,
                 skipped: Sequence[Skipped]) -> Row | None:
    saved = conn.execute(
        f"""UPDATE synedre.outbound_mail
              SET status = '{OutboundStatus.DRAFT_SAVED}', draft_folder = %s, draft_uidvalidity = %s, draft_uid = %s,
                  claimed_at = NULL, error = NULL, updated_at = now()
            WHERE id = %s AND status = '{OutboundStatus.DRAFTING}' AND attempts = %s RETURNING *""",
        (folder, uidvalidity, uid, row["id"], row["attempts"])).fetchone()
    if saved is not None:
        audit(conn, row["message_id"], "mail_draft_saved", kind=row["kind"],
               rfc_message_id=row["rfc_message_id"], folder=folder, draft_uid=uid,
               skipped=[{"name": s.name, "reason": s.reason} for s in skipped])
    return saved


def release(conn: Conn, row: Row, status: OutboundStatus, error: str, event: str, **detail: Any) -> None:
    """Give a claim back (nothing left the mailbox): `drafting` or `draft_saved`, unclaimed."""
    released = conn.execute(
        f"""UPDATE synedre.outbound_mail SET status = %s, claimed_at = NULL, error = %s,
                  updated_at = now(),
                  draft_uid = CASE WHEN %s::text = '{OutboundStatus.DRAFTING}' THEN NULL ELSE draft_uid END
            WHERE id = %s AND status = %s AND attempts = %s RETURNING id""",
        (status, error[:2000], status, row["id"], row["status"], row["attempts"])).fetchone()
    if released is not None:
        audit(conn, row["message_id"], event, kind=row["kind"], rfc_message_id=row["rfc_message_id"],
               attempt=row["attempts"], error=error[:500], **detail)


def claim_send(conn: Conn, row: Row) -> tuple[Row, str] | None:
    """`draft_saved -> sending` for one caller; the recipient read again in that transaction."""
    claimed = conn.execute(
        f"""UPDATE synedre.outbound_mail SET status = '{OutboundStatus.SENDING}', attempts = attempts + 1,
                  claimed_at = now(), updated_at = now()
            WHERE id = %s AND status = '{OutboundStatus.DRAFT_SAVED}' RETURNING *""", (row["id"],)).fetchone()
    if claimed is None:
        return None
    return claimed, founder(conn)["emails"][0]


def mark_sent(conn: Conn, row: Row, smtp_reply: str) -> None:
    # Not only from `sending`: a slow send whose lease ran out (send_unknown), or that an
    # operator meanwhile declared not sent (draft_saved, no newer claim: same attempt), knows
    # the truth it learned from the server.
    sent = conn.execute(
        f"""UPDATE synedre.outbound_mail SET status = '{OutboundStatus.SENT}', sent_at = now(), claimed_at = NULL,
                  error = NULL, updated_at = now()
            WHERE id = %s AND attempts = %s
              AND status IN ('{OutboundStatus.SENDING}', '{OutboundStatus.SEND_UNKNOWN}',
                             '{OutboundStatus.DRAFT_SAVED}')
            RETURNING id""",
        (row["id"], row["attempts"])).fetchone()
    if sent is not None:
        audit(conn, row["message_id"], "mail_sent", kind=row["kind"], rfc_message_id=row["rfc_message_id"],
               draft_uid=row["draft_uid"], attempt=row["attempts"], smtp_reply=smtp_reply[:200])


def mark_unknown(conn: Conn, row: Row, error: str) -> Row | None:
    unknown = conn.execute(
        f"""UPDATE synedre.outbound_mail SET status = '{OutboundStatus.SEND_UNKNOWN}', error = %s, updated_at = now()
            WHERE id = %s AND status = '{OutboundStatus.SENDING}' AND attempts = %s RETURNING *""",
        (error[:2000], row["id"], row["attempts"])).fetchone()
    if unknown is not None:
        audit(conn, row["message_id"], "mail_send_unknown", kind=row["kind"],
               rfc_message_id=row["rfc_message_id"], attempt=row["attempts"], reason="lost_during_data",
               error=error[:500])
    return unknown


def find(conn: Conn, message_db_id: int, kind: str) -> Row | None:
    return conn.execute("SELECT * FROM synedre.outbound_mail WHERE message_id = %s AND kind = %s",
                        (message_db_id, check_kind(kind))).fetchone()


def resolve_unknown(conn_factory: ConnFactory, message_db_id: int, kind: str, *, was_sent: bool) -> OutboundStatus:
    """An operator's verdict on a `send_unknown` mail (checked in the founder's inbox or the
    relay's log): sent, or not sent, in which case the next call sends its draft."""
    with conn_factory() as conn:
        row = conn.execute(
            f"""UPDATE synedre.outbound_mail
                  SET status = CASE WHEN %(sent)s THEN '{OutboundStatus.SENT}' ELSE '{OutboundStatus.DRAFT_SAVED}' END,
                      sent_at = CASE WHEN %(sent)s THEN now() END,
                      claimed_at = NULL, updated_at = now()
                WHERE message_id = %(mid)s AND kind = %(kind)s AND status = '{OutboundStatus.SEND_UNKNOWN}'
                RETURNING *""", {"sent": was_sent, "mid": message_db_id, "kind": check_kind(kind)}).fetchone()
        if row is None:
            raise OutboundError(f"message {message_db_id} kind {kind!r} is not send_unknown")
        audit(conn, message_db_id, "mail_resolved", kind=kind, rfc_message_id=row["rfc_message_id"],
               was_sent=was_sent)
    return OutboundStatus(row["status"])
