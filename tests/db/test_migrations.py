"""Migrations: idempotent, refuse unknown history, create the whole model with pgvector."""
import shutil

import psycopg
import pytest

from synedre.db import migrate
from tests.services import stack


@pytest.fixture
def fresh_url(tmp_path):
    server = stack.start_pg(tmp_path / "pg")
    yield server.get_uri()
    server.cleanup()


def test_upgrade_twice_applies_once_and_seeds_the_roster(fresh_url):
    from synedre.config import get_settings
    d = get_settings().migrations_dir
    first = migrate.upgrade(d, fresh_url)
    assert first == [m.version for m in migrate.available(d)]
    assert migrate.upgrade(d, fresh_url) == []
    with psycopg.connect(fresh_url) as conn:
        assert conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone()
        orbit0 = conn.execute("SELECT codename, group_name FROM synedre.agents WHERE orbite = 0").fetchall()
        assert orbit0 == [("atlas", "direction")]
        families = {r[0] for r in conn.execute("SELECT DISTINCT group_name FROM synedre.agents")}
        assert families == {"direction", "cadrage", "execution", "validation"}
        with pytest.raises(psycopg.errors.UniqueViolation):  # orbit 0 is Atlas's alone
            conn.execute("INSERT INTO synedre.agents (codename, nickname, role, group_name, orbite)"
                         " VALUES ('intrus', 'I', 'r', 'direction', 0)")


def test_upgrade_refuses_a_database_with_unknown_migrations(fresh_url, tmp_path):
    from synedre.config import get_settings
    newer = tmp_path / "newer"
    shutil.copytree(get_settings().migrations_dir, newer)
    (newer / "9999_future.sql").write_text("CREATE TABLE synedre.future (id int);")
    migrate.upgrade(newer, fresh_url)
    with pytest.raises(migrate.MigrationError, match="9999_future"):
        migrate.upgrade(get_settings().migrations_dir, fresh_url)


def test_upgrade_refuses_an_edited_migration(fresh_url, tmp_path):
    from synedre.config import get_settings
    copy = tmp_path / "m"
    shutil.copytree(get_settings().migrations_dir, copy)
    migrate.upgrade(copy, fresh_url)
    first = sorted(copy.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(migrate.MigrationError, match="edited"):
        migrate.upgrade(copy, fresh_url)


def test_a_failing_migration_leaves_nothing_half_applied(fresh_url, tmp_path):
    from synedre.config import get_settings
    copy = tmp_path / "m"
    shutil.copytree(get_settings().migrations_dir, copy)
    (copy / "9000_broken.sql").write_text("CREATE TABLE synedre.half (id int); SELECT 1/0;")
    with pytest.raises(migrate.MigrationError, match="9000_broken"):
        migrate.upgrade(copy, fresh_url)
    with psycopg.connect(fresh_url) as conn:
        assert conn.execute("SELECT to_regclass('synedre.half')").fetchone()[0] is None
