"""Least privilege in the database (SPEC §13): the fleet's embedded server admits its own OS
user, on its Unix socket, as the application role or the superuser (migrations); no role logs
in over loopback TCP, and the read-only agent role of 0008 is gone (issue 25)."""
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
from tests.services import stack

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


def tcp_login(s: Settings, role: str, password: str | None = None) -> None:
    """A login over loopback TCP to the embedded server of `s`, as `role`."""
    _, port = db._embedded_where(s) or pytest.fail("the embedded server is not running")
    psycopg.connect(host="127.0.0.1", port=port, user=role, dbname=db.EMBEDDED_DB, password=password,
                    connect_timeout=5).close()


def test_the_agent_role_and_its_view_are_gone_after_migrations(embedded):
    s, url = embedded
    with psycopg.connect(db.admin_url(url, s)) as conn:
        assert conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'synedre%' ORDER BY 1"
                            ).fetchall() == [("synedre_app",)]
        assert conn.execute("SELECT to_regclass('synedre.agent_doctrines')").fetchone() == (None,)
        assert conn.execute("SELECT version FROM synedre.schema_migrations WHERE version LIKE '0020%'"
                            ).fetchone() == ("0020_drop_agent_role",)


def test_no_role_logs_in_over_loopback_tcp_without_a_password(embedded):
    s, url = embedded
    for role in ("postgres", "synedre_app", "synedre_agent", "made_up_role"):
        with pytest.raises(psycopg.OperationalError) as refused:  # the server answers, and says no
            tcp_login(s, role)
        assert f'pg_hba.conf rejects connection for host "127.0.0.1", user "{role}"' in str(refused.value)
        with pytest.raises(psycopg.OperationalError, match="pg_hba.conf rejects"):  # nor with one
            tcp_login(s, role, password="guess")


def test_a_trust_line_in_the_embedded_server_s_hba_is_gone_at_its_next_start(embedded, monkeypatch):
    """An older release trusted a role on loopback TCP; the rewrite at start takes any such
    line away from a server already running (a reload, not a restart)."""
    s, url = embedded
    cmds, _ = db._pgserver()
    pgdata = db.embedded_pgdata(s)
    user = {"user": db._SYSTEM_USER} if os.geteuid() == 0 else {}
    hba = pgdata / "pg_hba.conf"
    hba.write_text("host all all 127.0.0.1/32 trust\n" + hba.read_text())
    cmds.pg_ctl(["reload"], pgdata=pgdata, timeout=30, **user)

    def tcp_ok() -> bool:
        try:
            tcp_login(s, "synedre_app")
        except psycopg.OperationalError:
            return False
        return True

    stack.wait_for(tcp_ok, 10, "the planted trust line to be in force")
    monkeypatch.setattr(db, "_embedded_url", None)
    assert db.database_url(s) == url  # the fleet's next start adopts the running server
    assert "trust" not in hba.read_text()
    stack.wait_for(lambda: not tcp_ok(), 10, "the rewritten hba to be in force")
    with psycopg.connect(url) as conn:  # the socket still admits the fleet
        assert conn.execute("SELECT current_user").fetchone() == ("synedre_app",)


def test_the_agent_role_is_dropped_by_the_last_database_of_a_cluster_to_migrate(embedded, tmp_path):
    """Roles belong to the cluster: a database that ran 0008 keeps the role without login
    until it runs 0020 as well, and the last one drops it."""
    s, url = embedded
    socket_dir, port = db._embedded_where(s) or pytest.fail("the embedded server is not running")
    before = tmp_path / "before-0020"
    shutil.copytree(s.migrations_dir, before)
    for late in before.glob("*.sql"):
        if late.name >= "0020":
            late.unlink()
    admin = db.admin_url(url, s)
    urls = [f"postgresql://{db.ADMIN_ROLE}@/{name}?host={socket_dir}&port={port}" for name in ("first", "second")]
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in ("first", "second"):
            conn.execute(f"CREATE DATABASE {name}")
    for each in urls:
        upgrade(before, each)

    def agent() -> tuple[bool] | None:
        with psycopg.connect(admin) as conn:
            return conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = 'synedre_agent'").fetchone()

    assert agent() == (True,)
    assert "0020_drop_agent_role" in upgrade(s.migrations_dir, urls[0])
    assert agent() == (False,)  # kept for the second database, without login
    with psycopg.connect(urls[0]) as conn:
        assert conn.execute("SELECT count(*) FROM information_schema.role_table_grants"
                            " WHERE grantee = 'synedre_agent'").fetchone() == (0,)
        assert conn.execute("SELECT to_regclass('synedre.agent_doctrines')").fetchone() == (None,)
    with psycopg.connect(urls[1]) as conn:
        assert conn.execute("SELECT count(*) > 0 FROM information_schema.role_table_grants"
                            " WHERE grantee = 'synedre_agent'").fetchone() == (True,)
    assert "0020_drop_agent_role" in upgrade(s.migrations_dir, urls[1])
    assert agent() is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another OS user")
def test_another_os_user_on_the_socket_is_refused_even_as_the_application_role(embedded):
    s, url = embedded
    other = pwd.getpwnam("pgserver")  # the one other user that can reach the socket in pgdata
    r = subprocess.run(["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--clear-groups",
                        "psql", "-X", url, "-c", "SELECT 1"], capture_output=True, text=True, timeout=30,
                       env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"})
    assert r.returncode != 0 and "Peer authentication failed" in r.stderr, r


def test_a_launch_gets_no_database_coordinates(tmp_path):
    from synedre.spawn.agent import env as agent_env

    s = Settings(state_dir=tmp_path, database_url="postgresql://app:S3cret@db.example/synedre")
    env = agent_env(s, "launch:1", tmp_path)
    assert not {k for k in env if k.startswith("PG")} and "S3cret" not in json.dumps(env)


def test_proofs_are_written_once_by_the_application_role_and_never_updated(embedded):
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
