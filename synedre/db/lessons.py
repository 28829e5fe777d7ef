"""SQL for lessons (SPEC §9.8): what the founder said (`lesson_sources`), the lessons it
became (`lessons`), and which lessons a launch was given (`launches.lesson_ids`)."""
from __future__ import annotations

from typing import Any

from synedre.db.messages import audit
from synedre.db.types import Conn

SOURCE_MAX_CHARS = 2000
# Held while a source is learnt: the nearest-lesson look-up and the insert of one client's
# lessons happen one at a time, so the same thing said twice at once is still one lesson.
LEARN_LOCK = 0x5359_4C45  # pg_advisory_xact_lock key, "SYLE"


def note(conn: Conn, kind: str, key: str | None, message_id: int, text: str) -> int | None:
    """Record, in the caller's transaction (the decision's), what was said of `message_id`,
    scoped to its client and to the agent of its last launch; `text` redacted already. None
    when there is nothing to learn (no text) or it was noted already (the same `key`)."""
    if not text.strip():
        return None
    row = conn.execute(
        """INSERT INTO synedre.lesson_sources (key, kind, message_id, client_id, agent_id, text)
           SELECT %(key)s, %(kind)s, %(m)s, s.client_id,
                  (SELECT a.id FROM synedre.launches l JOIN synedre.agents a ON a.codename = l.agent_codename
                    WHERE l.message_id = %(m)s ORDER BY l.attempt DESC LIMIT 1), %(text)s
             FROM synedre.email_states s WHERE s.message_id = %(m)s
           ON CONFLICT (key) DO NOTHING RETURNING id""",
        {"key": key, "kind": kind, "m": message_id, "text": text[:SOURCE_MAX_CHARS]}).fetchone()
    if row is None:
        return None
    audit(conn, message_id, "lesson_noted", kind=kind, source_id=row["id"])
    return int(row["id"])


def source(conn: Conn, source_id: int, *, lock: bool = False) -> dict[str, Any] | None:
    return conn.execute(
        f"""SELECT ls.*, r.subject FROM synedre.lesson_sources ls
              LEFT JOIN synedre.raw_messages r ON r.id = ls.message_id
             WHERE ls.id = %s {'FOR UPDATE OF ls' if lock else ''}""", (source_id,)).fetchone()


def overdue(conn: Conn, older_than_s: float, max_tries: int, limit: int = 100) -> list[int]:
    """Messages with something said not learnt `older_than_s` after it was noted (its task
    lost, or its learning failed), each offered again at most once per that delay."""
    return sorted({r["message_id"] for r in conn.execute(
        """UPDATE synedre.lesson_sources SET offered_at = now()
            WHERE id IN (SELECT id FROM synedre.lesson_sources
                          WHERE learnt_at IS NULL AND tries < %(max)s AND message_id IS NOT NULL
                            AND created_at < now() - make_interval(secs => %(s)s)
                            AND (offered_at IS NULL OR offered_at < now() - make_interval(secs => %(s)s))
                          ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
        RETURNING message_id""", {"max": max_tries, "s": older_than_s, "limit": limit})})


def unlearnt(conn: Conn, message_id: int) -> list[int]:
    return [r["id"] for r in conn.execute(
        "SELECT id FROM synedre.lesson_sources WHERE message_id = %s AND learnt_at IS NULL ORDER BY id",
        (message_id,))]


def nearest(conn: Conn, client_id: int | None, agent_id: int | None, vector: list[float],
            model: str) -> dict[str, Any] | None:
    """The live lesson of the same scope and embedding model closest to `vector`, with its
    cosine similarity."""
    return conn.execute(
        """SELECT id, 1 - (embedding <=> %(v)s::vector) AS similarity FROM synedre.lessons
            WHERE retired_at IS NULL AND embedding_model = %(m)s
              AND client_id IS NOT DISTINCT FROM %(c)s AND owner_agent_id IS NOT DISTINCT FROM %(a)s
            ORDER BY embedding <=> %(v)s::vector LIMIT 1""",
        {"v": str(vector), "m": model, "c": client_id, "a": agent_id}).fetchone()


def save(conn: Conn, lesson_id: int | None, *, title: str, body: str, vector: list[float], model: str,
         client_id: int | None, agent_id: int | None) -> int:
    """Insert a lesson, or say again the one `lesson_id` names (its words updated to the newest)."""
    if lesson_id is not None:
        conn.execute(
            """UPDATE synedre.lessons SET title = %s, body = %s, embedding = %s::vector, embedding_model = %s,
                      times_said = times_said + 1, updated_at = now() WHERE id = %s""",
            (title, body, str(vector), model, lesson_id))
        return lesson_id
    row = conn.execute(
        """INSERT INTO synedre.lessons (owner_agent_id, client_id, title, body, embedding, embedding_model)
           VALUES (%s, %s, %s, %s, %s::vector, %s) RETURNING id""",
        (agent_id, client_id, title, body, str(vector), model)).fetchone()
    assert row is not None
    return int(row["id"])


def learnt(conn: Conn, source_id: int, lesson_id: int) -> None:
    conn.execute("UPDATE synedre.lesson_sources SET lesson_id = %s, learnt_at = now(), error = NULL WHERE id = %s",
                 (lesson_id, source_id))


def failed(conn: Conn, source_id: int, error: str) -> None:
    conn.execute("UPDATE synedre.lesson_sources SET tries = tries + 1, error = %s WHERE id = %s",
                 (error[:500], source_id))


def given(conn: Conn, launch_id: int, lesson_ids: list[int]) -> None:
    """The launch was given these lessons: recorded on it, counted on them."""
    conn.execute("UPDATE synedre.launches SET lesson_ids = %s WHERE id = %s", (lesson_ids, launch_id))
    conn.execute("UPDATE synedre.lessons SET times_given = times_given + 1, last_given_at = now() WHERE id = ANY(%s)",
                 (lesson_ids,))


def listing(conn: Conn, client_id: int | None = None, *, retired: bool = False) -> list[dict[str, Any]]:
    """Lessons (a client's and the global ones when `client_id` is given), newest first,
    each with where it came from."""
    return conn.execute(
        """SELECT l.id, l.title, l.body, c.codename AS client, a.codename AS agent, l.times_said, l.times_given,
                  l.last_given_at, l.created_at, l.updated_at, l.retired_at, l.embedding_model,
                  coalesce((SELECT jsonb_agg(jsonb_build_object('kind', s.kind, 'message_id', s.message_id,
                                                                'at', s.created_at) ORDER BY s.id)
                              FROM synedre.lesson_sources s WHERE s.lesson_id = l.id), '[]') AS provenance
             FROM synedre.lessons l LEFT JOIN synedre.clients c ON c.id = l.client_id
             LEFT JOIN synedre.agents a ON a.id = l.owner_agent_id
            WHERE (%(c)s::bigint IS NULL OR l.client_id = %(c)s OR l.client_id IS NULL)
              AND (%(retired)s OR l.retired_at IS NULL)
            ORDER BY l.updated_at DESC, l.id DESC""", {"c": client_id, "retired": retired}).fetchall()


def retire(conn: Conn, lesson_id: int) -> bool:
    row = conn.execute("UPDATE synedre.lessons SET retired_at = now() WHERE id = %s AND retired_at IS NULL"
                       " RETURNING id", (lesson_id,)).fetchone()
    return row is not None


def of_launches(conn: Conn, message_id: int) -> list[dict[str, Any]]:
    """The lessons the message's launches were given, once each, in the order given."""
    return conn.execute(
        """SELECT l.id, l.title, l.body FROM synedre.lessons l
             JOIN (SELECT DISTINCT ON (x.id) x.id, x.n FROM synedre.launches la,
                          unnest(la.lesson_ids) WITH ORDINALITY AS x(id, n)
                    WHERE la.message_id = %s ORDER BY x.id, la.attempt, x.n) g ON g.id = l.id
            ORDER BY g.n""", (message_id,)).fetchall()


def note_operator(conn: Conn, client_id: int | None, agent_id: int | None, text: str) -> int:
    """An operator's lesson (`synedre lessons add`), to learn like the founder's words."""
    row = conn.execute(
        """INSERT INTO synedre.lesson_sources (kind, client_id, agent_id, text) VALUES ('operator', %s, %s, %s)
           RETURNING id""", (client_id, agent_id, text[:SOURCE_MAX_CHARS])).fetchone()
    assert row is not None
    return int(row["id"])


def drop_unlearnt(conn: Conn, source_id: int) -> None:
    """Forget an operator's source that was not learnt: he was told `not added`, so it must not linger."""
    conn.execute("DELETE FROM synedre.lesson_sources WHERE id = %s AND learnt_at IS NULL", (source_id,))
