"""Ordered SQL migrations in `migrations/`, applied once each, in one transaction each."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import psycopg

from synedre.db import admin_url, connect

SCHEMA = "synedre"
# Any constant works; it only serialises concurrent `db upgrade` runs.
_UPGRADE_LOCK = 0x5E_D7E


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def available(directory: Path) -> list[Migration]:
    return [Migration(p.stem, p) for p in sorted(directory.glob("*.sql"))]


def upgrade(directory: Path, url: str | None = None) -> list[str]:
    """Apply the missing migrations; return their versions. Refuses an unknown history.
    The embedded server's migrations run as its superuser, even when `url` is the
    application role's URL (which owns nothing and may not run DDL)."""
    known = available(directory)
    with connect(admin_url(url)) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_UPGRADE_LOCK,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations ("
            " version text PRIMARY KEY, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = {r["version"]: r["checksum"] for r in
                   conn.execute(f"SELECT version, checksum FROM {SCHEMA}.schema_migrations")}
        by_version = {m.version: m for m in known}
        unknown = sorted(set(applied) - set(by_version))
        if unknown:
            raise MigrationError(
                f"database has migrations this code does not know: {', '.join(unknown)}; "
                "refusing to run (is this an older release?)")
        changed = [v for v, c in applied.items() if by_version[v].checksum != c]
        if changed:
            raise MigrationError(f"applied migrations were edited since: {', '.join(changed)}")
        done = []
        for m in known:
            if m.version in applied:
                continue
            try:
                with conn.transaction():
                    conn.execute(m.sql)
                    conn.execute(
                        f"INSERT INTO {SCHEMA}.schema_migrations (version, checksum) VALUES (%s, %s)",
                        (m.version, m.checksum))
            except psycopg.Error as exc:
                raise MigrationError(f"migration {m.version} failed: {exc}") from exc
            done.append(m.version)
        return done


def status(directory: Path, url: str | None = None) -> dict[str, list[str]]:
    with connect(admin_url(url)) as conn:
        try:
            applied = [r["version"] for r in conn.execute(
                f"SELECT version FROM {SCHEMA}.schema_migrations ORDER BY version")]
        except psycopg.errors.UndefinedTable:
            applied = []
    return {"applied": applied,
            "pending": [m.version for m in available(directory) if m.version not in applied]}
