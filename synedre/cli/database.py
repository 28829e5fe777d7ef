"""`synedre db`: the schema's migrations, and the embedded PostgreSQL's URL and stop."""
from __future__ import annotations

import sys

from synedre.cli.common import USAGE, console, fail, need_database, sub_app
from synedre.config import get_settings

app = sub_app("Database schema.")


@app.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations (idempotent; refuses a database with unknown migrations)."""
    from synedre.db.migrate import MigrationError, upgrade

    try:
        done = upgrade(get_settings().migrations_dir)
    except MigrationError as exc:
        fail(str(exc))
    console.print(f"applied: {', '.join(done)}" if done else "database is up to date")


@app.command("status")
def db_status() -> None:
    """List applied and pending migrations."""
    from synedre.db.migrate import status

    need_database()
    console.print_json(data=status(get_settings().migrations_dir))


@app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL (refused while a fleet runs on it; a fleet stops the one it started)."""
    import warnings

    from synedre import db, fleet as fleet_mod

    if get_settings().database_url:
        fail("SYNEDRE_DATABASE_URL is set: that server is not ours to stop", USAGE)
    if pid := fleet_mod.running_fleet(get_settings().state_dir):
        fail(f"a fleet runs on {get_settings().state_dir} (pid {pid}) and uses this database: stop the fleet"
             " (Ctrl-C), which stops the database it started")
    with warnings.catch_warnings():  # pgserver's platformdirs warns about XDG_RUNTIME_DIR
        warnings.simplefilter("ignore")
        stopped = db.stop_embedded()
    console.print("embedded database stopped" if stopped else "embedded database was not running")


@app.command("url")
def db_url() -> None:
    """The database URL (embedded or configured), for `psql "$(synedre db url)"`."""
    from urllib.parse import urlsplit, urlunsplit

    from synedre import db

    need_database()
    u = urlsplit(db.database_url())
    if u.password:  # never print a password: psql reads it from PGPASSWORD or ~/.pgpass
        u = u._replace(netloc=u.netloc.replace(f":{u.password}@", "@"))
    sys.stdout.write(urlunsplit(u) + "\n")
