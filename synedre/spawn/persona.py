"""The persona an agent puts on: identity, frame, perimeter, lessons, mission, preferences.

The lessons are not in the persona's text: they hold the founder's and the client's words,
so the launch's request gives them inside a fence (`lessons_text`, spawn/prompt.py).

Three renderings by token budget (SPEC §8): core, metier (the launch default), full.
A failure to load lessons is reported in `Persona.lessons_error` for the caller to
audit; it is never swallowed into an empty string (SPEC §14).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg

from synedre.db.types import Conn

BUDGETS = {"core": 150, "metier": 350, "full": 600}  # tokens
CHARS_PER_TOKEN = 4  # a rough, stable estimate: French and English prose average ~4
# The client's lessons first (the founder's words about this client), then the agent's own,
# then global ones; a retired lesson is never given.
CLIENT_LESSONS, OWN_LESSONS, GLOBAL_LESSONS = 4, 3, 2

Level = Literal["core", "metier", "full"]


@dataclass(frozen=True)
class Vector:
    values: list[float]
    model: str  # "provider/model": only vectors of the same model are compared


Embed = Callable[[str], Vector | None]


def query_vector(text: str) -> Embed:
    """The lessons' query vector of `text`, computed now (a network call: before any
    transaction opens); `load` then only reads it back."""
    from synedre import ai

    e = ai.embed("lessons_embedding", [text[:2000]])
    failure = ai.last_failure() or "no embedding"

    def cached(_query: str) -> Vector | None:
        if e is None:
            raise RuntimeError(failure)
        return Vector(e.vectors[0], f"{e.provider}/{e.model}")
    return cached


@dataclass(frozen=True)
class Lesson:
    id: int
    title: str
    body: str

    def __str__(self) -> str:
        return f"{self.title}: {self.body}"

    def entry(self) -> str:
        """As the launch's LESSONS fence lists it: numbered by id, for the contract to cite."""
        return f"#{self.id} {self}"


@dataclass(frozen=True)
class Persona:
    agent: dict[str, Any]
    lessons: list[Lesson] = field(default_factory=list)
    mission_letter: str | None = None
    preferences: list[str] = field(default_factory=list)
    lessons_error: str | None = None


def load(conn: Conn, codename: str, *, query: str, embed: Embed,
         chantier_id: int | None = None, client_id: int | None = None) -> Persona:
    agent = conn.execute("SELECT * FROM synedre.agents WHERE codename = %s AND active", (codename,)).fetchone()
    if agent is None:
        raise LookupError(f"no active agent {codename!r}")
    lessons, error = [], None
    try:
        vector = embed(query)
        if vector is None:
            raise RuntimeError("no embedding provider answered")
    except Exception as exc:  # the embedding call's failure: reported, audited by the caller
        vector, error = None, f"{type(exc).__name__}: {exc}"[:300]
    if vector is not None:
        try:
            # a savepoint: a failing query must not abort the caller's transaction, so the
            # "audit it and go on" path still works
            with conn.transaction():
                lessons = _lessons(conn, agent["id"], client_id, vector)
                if not lessons:
                    error = _model_mismatch(conn, agent["id"], vector.model)
        except psycopg.Error as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
    mission = None
    if chantier_id is not None:
        row = conn.execute("SELECT mission_letter FROM synedre.chantiers WHERE id = %s", (chantier_id,)).fetchone()
        mission = row["mission_letter"] if row else None
    prefs = [f"{r['key']}: {r['value']}" for r in conn.execute(
        "SELECT key, value FROM synedre.founder_preferences WHERE slice = 'core' ORDER BY key")]
    return Persona(agent, lessons, mission, prefs, error)


def _lessons(conn: Conn, agent_id: int, client_id: int | None, v: Vector) -> list[Lesson]:
    # the client's first (its agent's before the others'), then the agent's own scars, then
    # global ones: a backend agent must not see a frontend agent's lessons before its own, nor
    # one client another's; only vectors made by the same model are compared
    rows = conn.execute(
        """(SELECT id, title, body, 0 AS rank, owner_agent_id IS DISTINCT FROM %(a)s AS other,
                   embedding <=> %(v)s::vector AS d FROM synedre.lessons
             WHERE client_id = %(c)s AND retired_at IS NULL AND embedding_model = %(m)s
             ORDER BY other, d LIMIT %(client)s)
           UNION ALL
           (SELECT id, title, body, 1, false, embedding <=> %(v)s::vector AS d FROM synedre.lessons
             WHERE client_id IS NULL AND owner_agent_id = %(a)s AND retired_at IS NULL AND embedding_model = %(m)s
             ORDER BY d LIMIT %(own)s)
           UNION ALL
           (SELECT id, title, body, 2, false, embedding <=> %(v)s::vector AS d FROM synedre.lessons
             WHERE client_id IS NULL AND owner_agent_id IS NULL AND retired_at IS NULL AND embedding_model = %(m)s
             ORDER BY d LIMIT %(glob)s)
           ORDER BY rank, other, d""",
        {"v": str(v.values), "m": v.model, "a": agent_id, "c": client_id, "client": CLIENT_LESSONS,
         "own": OWN_LESSONS, "glob": GLOBAL_LESSONS}).fetchall()
    return [Lesson(r["id"], r["title"], r["body"]) for r in rows]


def lessons_text(p: Persona) -> str:
    """The lessons as the launch's prompt gives them (inside a fence: they hold the
    founder's and the client's words), one per paragraph, each numbered by its id: the
    contract's `lessons_applied` cites them."""
    return "\n\n".join(lesson.entry() for lesson in p.lessons)


def _model_mismatch(conn: Conn, agent_id: int, model: str) -> str | None:
    """Lessons exist but none was embedded by `model`: say so rather than return nothing."""
    others = [r["embedding_model"] for r in conn.execute(
        """SELECT DISTINCT embedding_model FROM synedre.lessons WHERE embedding IS NOT NULL AND retired_at IS NULL
             AND (owner_agent_id = %s OR owner_agent_id IS NULL) ORDER BY 1""", (agent_id,))]
    if others:
        return f"embedding model mismatch: the query was embedded by {model}, lessons by {', '.join(others)}"
    return None


def _fit(lines: list[str], budget_tokens: int) -> str:
    out, used = [], 0
    limit = budget_tokens * CHARS_PER_TOKEN
    for line in lines:
        if not line:
            continue
        if used + len(line) > limit:
            room = limit - used
            if room > 40:
                out.append(line[:room - 1] + "…")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def render(p: Persona, level: Level = "metier") -> str:
    """The persona within its level's budget; the most important lines come first."""
    a = p.agent
    lines = [f"Tu es {a['nickname']} ({a['codename']}), {a['role']}.", f"Cadre: {a['cognitive_frame'] or ''}"]
    if level in ("metier", "full"):
        lines += [f"Mission: {a['job_mission'] or ''}", f"Périmètre: {a['job_perimeter'] or ''}",
                  f"Contrôles: {a['job_key_checks'] or ''}"]
    if p.mission_letter:
        lines.append(f"Lettre de mission du chantier: {p.mission_letter}")
    lines += [f"Préférence du fondateur: {pref}" for pref in p.preferences]
    if level == "full":
        lines += [f"Héritage: {a['heritage'] or ''}", f"Citation: {a['quote'] or ''}",
                  f"Personnalité: {a['personality'] or ''}", f"Inspiration: {a['inspiration'] or ''}",
                  f"Preuve: {a['proof'] or ''}"]
    return _fit(lines, BUDGETS[level])
