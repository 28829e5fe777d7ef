"""SQL to read the founder's approval requests; their one writer is synedre/approvals/decisions.py."""
from __future__ import annotations

from synedre.db.types import Conn, Row
from synedre.pipeline import ApprovalStatus


def waiting(conn: Conn) -> list[Row]:
    """The requests still waiting for an answer, oldest first, with their message's subject."""
    return conn.execute(
        """SELECT a.message_id, a.rule, a.token, a.created_at, a.expires_at, r.subject,
                  extract(epoch FROM now() - a.created_at)::bigint AS age_s
             FROM synedre.approvals a JOIN synedre.raw_messages r ON r.id = a.message_id
            WHERE a.status = %s ORDER BY a.created_at""", (str(ApprovalStatus.WAITING),)).fetchall()
