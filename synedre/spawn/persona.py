"""The persona an agent puts on: identity, frame, perimeter, lessons, mission, preferences.

Three renderings by token budget (SPEC §8): core, metier (the launch default), full.
A failure to load lessons is reported in `Persona.lessons_error` for the caller to
audit; it is never swallowed into an empty string (SPEC §14).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import psycopg

BUDGETS = {"core": 150, "metier": 350, "full": 600}  # tokens
CHARS_PER_TOKEN = 4  # a rough, stable estimate: French and English prose average ~4
OWN_LESSONS, GLOBAL_LESSONS = 3, 2

Level = Literal["core", "metier", "full"]
Embed = Callable[[str], list[float] | None]


@dataclass(frozen=True)
class Persona:
    agent: dict[str, Any]
    lessons: list[str] = field(default_factory=list)
    mission_letter: str | None = None
    preferences: list[str] = field(default_factory=list)
    lessons_error: str | None = None


def load(conn: psycopg.Connection, codename: str, *, query: str, embed: Embed,
         chantier_id: int | None = None) -> Persona:
    agent = conn.execute("SELECT * FROM synedre.agents WHERE codename = %s AND active", (codename,)).fetchone()
    if agent is None:
        raise LookupError(f"no active agent {codename!r}")
    lessons, error = [], None
    try:
        vector = embed(query)
        if vector is None:
            raise RuntimeError("no embedding provider answered")
        # the agent's own scars first, then global ones: a backend agent must not
        # see a frontend agent's lessons before its own
        rows = conn.execute(
            """(SELECT title, body, 0 AS rank, embedding <=> %(v)s::vector AS d FROM synedre.lessons
                 WHERE owner_agent_id = %(a)s AND embedding IS NOT NULL ORDER BY d LIMIT %(own)s)
               UNION ALL
               (SELECT title, body, 1, embedding <=> %(v)s::vector AS d FROM synedre.lessons
                 WHERE owner_agent_id IS NULL AND embedding IS NOT NULL ORDER BY d LIMIT %(glob)s)
               ORDER BY rank, d""",
            {"v": str(vector), "a": agent["id"], "own": OWN_LESSONS, "glob": GLOBAL_LESSONS}).fetchall()
        lessons = [f"{r['title']}: {r['body']}" for r in rows]
    except Exception as exc:  # reported to the caller, which audits it; the launch goes on
        error = f"{type(exc).__name__}: {exc}"[:300]
    mission = None
    if chantier_id is not None:
        row = conn.execute("SELECT mission_letter FROM synedre.chantiers WHERE id = %s", (chantier_id,)).fetchone()
        mission = row and row["mission_letter"]
    prefs = [f"{r['key']}: {r['value']}" for r in conn.execute(
        "SELECT key, value FROM synedre.founder_preferences WHERE slice = 'core' ORDER BY key")]
    return Persona(agent, lessons, mission, prefs, error)


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
    lines += [f"Leçon: {lesson}" for lesson in p.lessons]
    if p.mission_letter:
        lines.append(f"Lettre de mission du chantier: {p.mission_letter}")
    lines += [f"Préférence du fondateur: {pref}" for pref in p.preferences]
    if level == "full":
        lines += [f"Héritage: {a['heritage'] or ''}", f"Citation: {a['quote'] or ''}",
                  f"Personnalité: {a['personality'] or ''}", f"Inspiration: {a['inspiration'] or ''}",
                  f"Preuve: {a['proof'] or ''}"]
    return _fit(lines, BUDGETS[level])
