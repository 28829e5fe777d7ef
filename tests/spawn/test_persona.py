"""Persona: own lessons first, budgets respected, a lessons failure reported, never silent."""
import psycopg
import pytest
from psycopg.rows import dict_row

from synedre.ai.providers.local import hashed_vector
from synedre.spawn import persona

pytestmark = pytest.mark.timeout(60)


MODEL = "local/hash-1024"


def vec(text):
    return persona.Vector(hashed_vector(text, 1024), MODEL)


@pytest.fixture
def conn(db):
    with psycopg.connect(db, row_factory=dict_row, autocommit=True) as c:
        c.execute("SET search_path TO synedre, public")  # as the application's pool does
        c.execute("DELETE FROM synedre.lessons")
        c.execute("DELETE FROM synedre.founder_preferences")
        backend = c.execute("SELECT id FROM synedre.agents WHERE codename = 'backend'").fetchone()["id"]
        frontend = c.execute("SELECT id FROM synedre.agents WHERE codename = 'frontend'").fetchone()["id"]
        for owner, title, body in [
            (backend, "migrations", "toujours une migration réversible avant de toucher au schéma SQL"),
            (frontend, "css", "ne jamais toucher aux composants publics partagés du checkout"),
            (None, "git", "jamais de git stash, toujours des commits atomiques"),
        ]:
            c.execute("INSERT INTO synedre.lessons (owner_agent_id, title, body, embedding, embedding_model)"
                      " VALUES (%s, %s, %s, %s, %s)", (owner, title, body, str(vec(f"{title} {body}").values), MODEL))
        c.execute("INSERT INTO synedre.founder_preferences (key, value) VALUES ('ton', 'vouvoiement, concis')")
        yield c


def test_own_lessons_come_before_global_ones_and_others_lessons_never(conn):
    p = persona.load(conn, "backend", query="migration du schéma SQL", embed=vec)
    assert p.lessons_error is None
    given = [str(lesson) for lesson in p.lessons]
    assert given[0].startswith("migrations") and given[1].startswith("git")
    assert not any(lesson.startswith("css") for lesson in given)
    assert p.preferences == ["ton: vouvoiement, concis"]


def test_a_clients_lessons_come_first_another_clients_never_and_a_retired_one_never(conn):
    a, b = (conn.execute("INSERT INTO synedre.clients (codename, name) VALUES (%s, %s) RETURNING id",
                         (f"client-{x}", x)).fetchone()["id"] for x in "ab")
    backend = conn.execute("SELECT id FROM synedre.agents WHERE codename = 'backend'").fetchone()["id"]
    rows = {}
    for client, title in [(a, "horaires"), (b, "tarifs"), (a, "retirée")]:
        rows[title] = conn.execute(
            "INSERT INTO synedre.lessons (owner_agent_id, client_id, title, body, embedding, embedding_model)"
            " VALUES (%s, %s, %s, 'corps', %s, %s) RETURNING id",
            (backend, client, title, str(vec(title).values), MODEL)).fetchone()["id"]
    conn.execute("UPDATE synedre.lessons SET retired_at = now() WHERE id = %s", (rows["retirée"],))
    p = persona.load(conn, "backend", query="migration du schéma SQL", embed=vec, client_id=a)
    assert [lesson.title for lesson in p.lessons] == ["horaires", "migrations", "git"]
    assert "horaires: corps" in persona.lessons_text(p) and "Leçon" not in persona.render(p, "full")
    other = persona.load(conn, "backend", query="x", embed=vec, client_id=b)
    assert [lesson.title for lesson in other.lessons][0] == "tarifs" and "horaires" not in persona.lessons_text(other)


def test_renderings_stay_within_their_budgets_and_grow(conn):
    p = persona.load(conn, "backend", query="x", embed=vec)
    sizes = {level: len(persona.render(p, level)) for level in persona.BUDGETS}
    for level, tokens in persona.BUDGETS.items():
        assert sizes[level] <= tokens * persona.CHARS_PER_TOKEN
    assert sizes["core"] < sizes["metier"] <= sizes["full"]
    assert "Périmètre" in persona.render(p, "metier") and "Périmètre" not in persona.render(p, "core")


def test_a_lessons_failure_is_reported_not_swallowed(conn):
    p = persona.load(conn, "backend", query="x", embed=lambda _: None)
    assert p.lessons == [] and "no embedding provider" in p.lessons_error
    def boom(_):
        raise TimeoutError("embedding timed out")
    assert "TimeoutError" in persona.load(conn, "backend", query="x", embed=boom).lessons_error


def test_unknown_agent_is_an_error(conn):
    with pytest.raises(LookupError):
        persona.load(conn, "nobody", query="x", embed=vec)


def test_vectors_of_another_model_are_never_compared_and_the_mismatch_is_reported(conn):
    p = persona.load(conn, "backend", query="migration du schéma SQL",
                     embed=lambda text: persona.Vector(hashed_vector(text, 1024), "mistral/mistral-embed"))
    assert p.lessons == []
    assert "embedding model mismatch" in p.lessons_error and MODEL in p.lessons_error


def test_a_failing_lessons_query_leaves_the_callers_transaction_usable(conn):
    conn.autocommit = False
    with conn.transaction():
        # a vector of the wrong dimension makes PostgreSQL refuse the lessons query
        p = persona.load(conn, "backend", query="x", embed=lambda _: persona.Vector([0.1, 0.2], MODEL))
        assert p.lessons == [] and p.lessons_error is not None
        assert "DataException" in p.lessons_error or "dimensions" in p.lessons_error
        # the surrounding transaction is still alive: the caller can audit and go on
        assert conn.execute("SELECT 1 AS one").fetchone()["one"] == 1
