"""Least privilege in the database (SPEC §13): the fleet's embedded server admits its own OS
user as the application role or the superuser (migrations), the agent's coordinates reach
only the agent role, which reads a few tables and writes nothing."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess

import psycopg
import pytest

from synedre import db
from synedre.config import Settings, get_settings
from synedre.db.migrate import upgrade

pytestmark = [pytest.mark.timeout(180), pytest.mark.integration,
              pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture
def embedded(tmp_path, monkeypatch):
    """The fleet's own embedded server under a fresh state dir, migrated through the
    application URL exactly as `synedre fleet` hands it over; its settings, its app URL."""
    monkeypatch.delenv("SYNEDRE_DATABASE_URL", raising=False)
    monkeypatch.setenv("SYNEDRE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(db, "_embedded_url", None)
    get_settings.cache_clear()
    s = Settings(state_dir=tmp_path / "state", database_url=None)
    url = db.database_url(s)
    upgrade(s.migrations_dir, url)
    yield s, url
    db.stop_embedded(s)
    get_settings.cache_clear()


def insert_message(url: str) -> int:
    """What ingestion and a stage do, as the application role."""
    with psycopg.connect(url, autocommit=True) as conn:
        mid = conn.execute(
            "INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, raw, size)"
            " VALUES ('atlas', 1, 1, '<m@x>', 'Subject: secret', 15) RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO synedre.email_states (message_id, status) VALUES (%s, 'classified')", (mid,))
        conn.execute("UPDATE synedre.email_states SET status = 'spawning' WHERE message_id = %s", (mid,))
        conn.execute("INSERT INTO synedre.audit_log (message_id, event) VALUES (%s, 'spawn_started')", (mid,))
    return mid


def agent_psql(s: Settings, sql: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    """psql as the read-only role: only its coordinates, no password."""
    url = str(db.agent_url(s))
    if user:
        url = url.replace("synedre_agent@", f"{user}@", 1)
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}
    return subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-Atc", sql, url], env=env, capture_output=True,
                          text=True, timeout=30)


def state_of(url: str, mid: int) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (mid,)).fetchone()[0]


def test_the_fleet_connects_as_the_application_role_and_runs_stage_sql(embedded):
    s, url = embedded
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_user, usesuper FROM pg_user WHERE usename = current_user"
                            ).fetchone() == ("synedre_app", False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # never DDL
            conn.execute("CREATE TABLE synedre.nope (id int)")
    mid = insert_message(url)
    assert state_of(url, mid) == "spawning"
    assert db.admin_url(url, s) != url  # migrations go through the superuser
    with psycopg.connect(db.admin_url(url, s)) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (scripts/system-deps)")
def test_the_agent_role_is_refused_the_state_row_and_the_raw_messages(embedded):
    s, url = embedded
    mid = insert_message(url)
    agent = db.agent_url(s)
    assert agent is not None and agent.startswith("postgresql://synedre_agent@127.0.0.1:")

    update = agent_psql(s, "UPDATE synedre.email_states SET status = 'actioned'")
    assert update.returncode != 0 and "permission denied for table email_states" in update.stderr, update
    raw = agent_psql(s, "SELECT raw FROM synedre.raw_messages")
    assert raw.returncode != 0 and "permission denied for table raw_messages" in raw.stderr, raw
    for table in ("audit_log", "launches", "launch_events", "attachments", "clients", "doctrines"):
        r = agent_psql(s, f"SELECT count(*) FROM synedre.{table}")
        assert r.returncode != 0 and "permission denied" in r.stderr, (table, r)
    assert state_of(url, mid) == "spawning"
    # what its work needs, it reads
    ok = agent_psql(s, "SELECT count(*) > 0 FROM synedre.agents; SELECT count(*) FROM synedre.lessons;"
                       " SELECT count(*) FROM synedre.agent_doctrines")
    assert ok.returncode == 0 and ok.stdout.split() == ["t", "0", "0"], ok


def test_only_global_doctrines_reach_the_agent(embedded):
    s, url = embedded
    with psycopg.connect(url, autocommit=True) as conn:
        client = conn.execute("INSERT INTO synedre.clients (codename, name) VALUES ('dupont', 'D')"
                              " RETURNING id").fetchone()[0]
        chantier = conn.execute("INSERT INTO synedre.chantiers (codename, client_id, title)"
                                " VALUES ('c1', %s, 't') RETURNING id", (client,)).fetchone()[0]
        conn.execute("INSERT INTO synedre.doctrines (chantier_id, title, body) VALUES (%s, 'theirs', 'x'),"
                     " (NULL, 'global', 'y')", (chantier,))
    with psycopg.connect(db.agent_url(s)) as conn:
        assert conn.execute("SELECT title FROM synedre.agent_doctrines").fetchall() == [("global",)]


def test_the_agent_coordinates_reach_no_other_role_and_no_password_is_needed_to_be_refused(embedded):
    s, url = embedded
    agent = db.agent_url(s)
    assert agent is not None and ":" not in agent.split("//", 1)[1].split("@", 1)[0]  # no password in it
    for role in ("postgres", "synedre_app"):
        with pytest.raises(psycopg.OperationalError, match="pg_hba.conf rejects"):
            psycopg.connect(agent.replace("synedre_agent@", f"{role}@", 1), connect_timeout=5)
    with psycopg.connect(agent) as conn:
        assert conn.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
                            ).fetchone() == ("synedre_agent", False)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another OS user")
def test_another_os_user_on_the_socket_is_refused_even_as_the_application_role(embedded):
    s, url = embedded
    other = pwd.getpwnam("pgserver")  # the one other user that can reach the socket in pgdata
    r = subprocess.run(["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--clear-groups",
                        "psql", "-X", url, "-c", "SELECT 1"], capture_output=True, text=True, timeout=30,
                       env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"})
    assert r.returncode != 0 and "Peer authentication failed" in r.stderr, r


def test_an_external_database_has_no_agent_url_and_a_launch_gets_no_database_coordinates(tmp_path):
    from synedre.spawn.agent import env as agent_env

    s = Settings(state_dir=tmp_path, database_url="postgresql://app:S3cret@db.example/synedre")
    assert db.agent_url(s) is None
    env = agent_env(s, "launch:1", tmp_path)
    assert not {k for k in env if k.startswith("PG")} and "S3cret" not in json.dumps(env)


def test_proofs_are_written_once_by_the_application_role_and_unread_by_the_agent(embedded):
    import hashlib

    s, url = embedded
    data = b"\x89PNG\r\n\x1a\nproof"
    key = hashlib.sha256(data).hexdigest()
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(2):  # what synedre.db.proofs.store does, twice: one row
            conn.execute("INSERT INTO synedre.proofs (sha256, kind, mime, size, content) VALUES (%s, 'screenshot',"
                         " 'image/png', %s, %s) ON CONFLICT (sha256) DO NOTHING", (key, len(data), data))
        assert conn.execute("SELECT count(*) FROM synedre.proofs").fetchone() == (1,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE synedre.proofs SET kind = 'diff'")
    if shutil.which("psql"):
        r = agent_psql(s, "SELECT count(*) FROM synedre.proofs")
        assert r.returncode != 0 and "permission denied for table proofs" in r.stderr, r
