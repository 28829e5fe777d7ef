"""Operate the Synedre fleet (an email in, executed work out): run it, see its status,
inspect and retry messages, pause launches.

Exit codes: 0 done; 1 the operation failed or was refused; 2 a usage or configuration
error; 3 a dependency is down or not ready (PostgreSQL, Redis, clamd, IMAP, a database
not created or not migrated). Errors are one line; --verbose adds the traceback."""
from __future__ import annotations

import json
import os
import pwd
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from synedre import log as logging_setup
from synedre.config import ConfigError, Settings, get_settings, unknown_variables
from synedre.pipeline import STAGES, ApprovalStatus, LaunchStatus, Status

OK, FAILED, USAGE, DEPENDENCY = 0, 1, 2, 3
RETRY_STAGES = tuple(s.name for s in STAGES if s.entry)


class Unavailable(Exception):
    """A dependency the command needs did not answer; the message says which, where and
    what to check."""


class _OneErrorPath(TyperGroup):
    """Whatever a command raises ends here: one line on stderr and its exit code
    (`explain`); the traceback too with --verbose."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort):  # usage errors, exits: typer's own
            raise
        except Exception as exc:
            if ctx.params.get("verbose"):
                err.print_exception()
            try:
                code, line = explain(exc)
            except Exception:  # the error path itself must not end in a traceback
                code, line = FAILED, f"{type(exc).__name__} (--verbose shows where)"
            fail(line, code)


def _typer(help: str | None, **kw: Any) -> typer.Typer:
    # plain help: no type on a flag, the choices of an option listed
    return typer.Typer(no_args_is_help=True, add_completion=False, help=help, rich_markup_mode=None,
                       pretty_exceptions_enable=False, **kw)


app = _typer(__doc__, cls=_OneErrorPath)
db_app = _typer("Database schema.")
directory_app = _typer("Founder, clients and their people, tenants, chantiers, mock-ups.")
app.add_typer(db_app, name="db")
app.add_typer(directory_app, name="directory")
report_app = _typer("Reports.")
app.add_typer(report_app, name="report")
spawn_app = _typer("The launch kill switch (durable, fleet-wide).")
app.add_typer(spawn_app, name="spawn")
launch_app = _typer("One message's launch, by hand.")
app.add_typer(launch_app, name="launch")
mailbox_app = _typer("The mailboxes of the registry (SYNEDRE_MAILBOXES_FILE).")
app.add_typer(mailbox_app, name="mailbox")
try_app = _typer("A try-out on this machine (`make try`): a local mailbox for Atlas, a mail sink for the founder,"
                 " an example client with its pre-production site, and the fleet; only the LLM keys are yours.")
app.add_typer(try_app, name="try")
# A terminal's width (or COLUMNS); piped elsewhere, whole lines (rich would assume 80).
PIPE_WIDTH = 400
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH)
err = Console(stderr=True, soft_wrap=True)


# `synedre fleet` looks at its dependencies this often; one down this long is an incident.
DEPENDENCY_CHECK_S, DEPENDENCY_DOWN_S = 30.0, 300.0


def fail(message: str, code: int = FAILED) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(scrub(message))}")
    raise typer.Exit(code)


def scrub(line: str) -> str:
    """The line without any configured secret: a library's message may quote one (libpq a
    URL's password, a key in a request). Settings that do not load have none to hide (their
    ConfigError never quotes a secret nor a URL)."""
    try:
        from synedre import secrets

        return secrets.redactor().redact_text(line)
    except Exception:
        return line


def explain(exc: Exception) -> tuple[int, str]:
    """(exit code, one line) for an error no command handled itself."""
    import psycopg
    import redis
    from kombu.exceptions import OperationalError as BrokerError
    from psycopg_pool import PoolTimeout

    from synedre.spawn.locks import LaunchGuardUnavailable

    first = scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0])
    from synedre.mailboxes import RegistryError

    if isinstance(exc, ConfigError):
        return USAGE, f"configuration: {exc}"
    if isinstance(exc, RegistryError):
        return USAGE, first
    if isinstance(exc, Unavailable):
        return DEPENDENCY, str(exc)
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn
                  | psycopg.errors.InvalidSchemaName):
        return DEPENDENCY, f"the database ({_postgres_where()}) is not migrated ({first}): run `synedre db upgrade`"
    # no connection (no SQLSTATE, class 08, a server shutting down), not a lock timeout
    if isinstance(exc, PoolTimeout) or isinstance(exc, psycopg.OperationalError) and (
            exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))):
        return DEPENDENCY, (f"PostgreSQL ({_postgres_where()}) is not reachable ({_postgres_why(exc)}):"
                            " check that it runs, and SYNEDRE_DATABASE_URL")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | BrokerError | LaunchGuardUnavailable):
        return DEPENDENCY, f"Redis ({_redis_where()}) is not reachable ({first}): start it, or fix SYNEDRE_BROKER_URL"
    return FAILED, f"{type(exc).__name__}: {first} (--verbose shows where)"


def _postgres_where() -> str:
    from psycopg.conninfo import conninfo_to_dict

    from synedre import db

    s = get_settings()
    if not s.database_url:
        return f"embedded, in {db.embedded_pgdata(s)}"
    c = conninfo_to_dict(s.database_url)  # never the user nor the password
    return f"{c.get('host') or 'local socket'}:{c.get('port') or 5432}/{c.get('dbname') or ''}"


def _postgres_why(exc: Exception) -> str:
    """The reason; a pool's timeout says none, so one direct attempt finds it."""
    import psycopg
    from psycopg_pool import PoolTimeout

    from synedre import db

    if isinstance(exc, PoolTimeout):
        try:
            db.connect().close()
        except psycopg.Error as direct:
            exc = direct
    return scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0])


def _redis_where() -> str:
    from urllib.parse import urlsplit

    u = urlsplit(get_settings().broker_url)
    return f"{u.hostname}:{u.port or 6379}{u.path}"


def need_database() -> None:
    """Stop, saying so, where a command would otherwise create an empty embedded database."""
    from synedre.health import missing_database

    if why := missing_database(get_settings()):
        fail(why, DEPENDENCY)


def _listing(rows: Sequence[dict[str, str | Text]], *, whole: Sequence[str], wide: bool,
             wide_only: Sequence[str] = (), empty: str) -> None:
    """A listing that fits the terminal, 80 columns included: the `whole` columns (ids,
    statuses, codenames) are never folded nor cut; longer text is cut with "…" to fit. With
    --wide, the `wide_only` columns too and nothing cut: one table when it fits (as piped),
    else each row's text whole under its line."""
    if not rows:
        console.print(empty)
        return
    wide = wide or console.width >= PIPE_WIDTH
    names = [n for n in rows[0] if wide or n not in wide_only]
    cells = [{n: v if isinstance(v, Text) else Text(v) for n, v in r.items()} for r in rows]
    natural = {n: max(len(n), *(c[n].cell_len for c in cells)) for n in names}
    text = sorted((n for n in names if n not in whole), key=lambda n: natural[n])
    spare = console.width - sum(natural[n] for n in names if n in whole) - 3 * (len(names) - 1)
    if wide and sum(natural[n] for n in text) > spare:
        return _records(cells, [n for n in names if n in whole], [n for n in names if n not in whole], natural)
    widths = {}
    for i, n in enumerate(text):  # the narrowest first, each at most its fair share of what is left
        widths[n] = max(4, min(natural[n], spare // (len(text) - i)))
        spare -= widths[n]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for n in names:
        table.add_column(n, no_wrap=True, overflow="ellipsis", width=widths.get(n), min_width=natural[n]
                         if n in whole else None)
    for c in cells:
        table.add_row(*(c[n] for n in names))
    console.print(table)


def _records(cells: list[dict[str, Text]], line: list[str], text: list[str], natural: dict[str, int]) -> None:
    """--wide in a narrow terminal: each row's whole columns on its line, its text under it."""
    from rich.padding import Padding

    console.print(Text("  ".join(n.ljust(natural[n]) for n in line).rstrip(), style="bold"))
    for c in cells:
        head = Text("  ").join(c[n] + " " * (natural[n] - c[n].cell_len) for n in line)
        head.rstrip()
        console.print(head)
        for n in text:
            if c[n].plain:
                console.print(Padding(Text(f"{n}: ") + c[n], (0, 0, 0, 4)))


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v",
                                       help="Log at DEBUG, here and in every process this command starts;"
                                            " an error shows its traceback")) -> None:
    if verbose:  # through the environment, so the fleet's children log at DEBUG too
        os.environ["SYNEDRE_LOG_LEVEL"] = "DEBUG"
        get_settings.cache_clear()
    s = get_settings()
    logging_setup.configure(s.log_format, s.log_level)
    for line in unknown_variables():  # a misspelt setting would otherwise be ignored in silence
        err.print(f"[bold yellow]warning:[/] {escape(line)}")
    if not verbose:  # the pool's retries would repeat, line after line, the error said once at the end
        import logging

        logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations (idempotent; refuses a database with unknown migrations)."""
    from synedre.db.migrate import MigrationError, upgrade

    try:
        done = upgrade(get_settings().migrations_dir)
    except MigrationError as exc:
        fail(str(exc))
    console.print(f"applied: {', '.join(done)}" if done else "database is up to date")


@db_app.command("status")
def db_status() -> None:
    """List applied and pending migrations."""
    from synedre.db.migrate import status

    need_database()
    console.print_json(data=status(get_settings().migrations_dir))


@db_app.command("stop")
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


@db_app.command("url")
def db_url() -> None:
    """The database URL (embedded or configured), for `psql "$(synedre db url)"`."""
    from urllib.parse import urlsplit, urlunsplit

    from synedre import db

    need_database()
    u = urlsplit(db.database_url())
    if u.password:  # never print a password: psql reads it from PGPASSWORD or ~/.pgpass
        u = u._replace(netloc=u.netloc.replace(f":{u.password}@", "@"))
    sys.stdout.write(urlunsplit(u) + "\n")


@directory_app.command("mockup")
def directory_mockup(chantier: Annotated[str, typer.Argument(help="The chantier's codename (from the directory)")],
                     route: Annotated[str, typer.Argument(help="The page's route, e.g. /contact")],
                     image: Annotated[Path, typer.Argument(help="The mock-up, a PNG or JPEG image")]) -> None:
    """Attach a mock-up image to a route of a chantier: QA compares the page with it."""
    import hashlib
    import re
    import shutil

    from synedre import db
    from synedre.db import proofs
    from synedre.orchestrate import iso

    try:
        iso.load_image(image)
    except (OSError, iso.IsoError) as exc:
        fail(f"{image}: not a readable image ({exc})", USAGE)
    need_database()
    with db.transaction() as conn:
        row = conn.execute("SELECT id FROM synedre.chantiers WHERE codename = %s", (chantier,)).fetchone()
        if row is None:
            fail(f"no chantier {chantier!r} (`synedre directory show` lists them)")
        # a private copy: QA workers must not depend on the operator's file staying put
        target = (get_settings().state_dir / "mockups" / chantier).resolve()
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        # readable, and unique per route: /a/b and /a-b make the same slug, not the same file
        slug = re.sub(r"[^A-Za-z0-9]+", "-", route).strip("-") or "root"
        copy = target / f"{slug}-{hashlib.sha256(route.encode()).hexdigest()[:8]}.png"
        shutil.copyfile(image, copy)
        os.chmod(copy, 0o600)
        try:  # in the database: QA workers on other hosts compare with it too
            proof = proofs.store(conn, copy.read_bytes(), "mockup")
        except proofs.ProofError as exc:
            fail(f"{image}: {exc}", USAGE)
        conn.execute("INSERT INTO synedre.mockups (chantier_id, route, path, proof) VALUES (%s, %s, %s, %s)"
                     " ON CONFLICT (chantier_id, route) DO UPDATE SET path = EXCLUDED.path, proof = EXCLUDED.proof",
                     (row["id"], route, str(copy), proof))
    console.print(f"mock-up for {chantier} {route}: {copy}")


@directory_app.command("import")
def directory_import(file: Annotated[Path, typer.Argument(help="A directory file, JSON: see directory.example.json")]
                     ) -> None:
    """Load the founder, clients with their people and tenants, and chantiers; re-importing
    updates, never duplicates."""
    from synedre import db
    from synedre.db.directory import DirectoryError, import_directory, parse_file

    try:
        d = parse_file(file.read_bytes())
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", USAGE)
    except DirectoryError as exc:
        fail(f"{file}: {exc}")
    need_database()
    with db.transaction() as conn:
        counts = import_directory(conn, d)
    console.print(f"imported {file}: founder {d.founder.name}, " + ", ".join(f"{n} {k}" for k, n in counts.items()))


@directory_app.command("show")
def directory_show(client: Annotated[str | None, typer.Argument(
                       help="A client's codename: its tenant as the fleet uses it (target, pre-production, repository)")
                   ] = None,
                   wide: bool = typer.Option(False, "--wide", help="Long text whole (folded)")) -> None:
    """The directory as the stages read it: the founder, each client with its people and tenant,
    the chantiers; with CLIENT, what the fleet uses for that client."""
    from synedre import db

    need_database()
    if client is not None:
        return _show_tenant(client)
    with db.transaction() as conn:
        founder = conn.execute("SELECT name, emails, atlas_address FROM synedre.founder").fetchone()
        clients = conn.execute(
            """SELECT c.codename, c.name, c.priority, c.status, coalesce(t.deploy_target, c.deploy_target) AS target,
                      t.config->>'preprod_url' AS preprod, array_to_string(c.domains, ' ') AS domains,
                      (SELECT string_agg(p.email, ' ' ORDER BY p.email) FROM synedre.client_persons p
                        WHERE p.client_id = c.id) AS persons
                 FROM synedre.clients c LEFT JOIN synedre.tenant_topology t ON t.client_id = c.id
                ORDER BY c.codename""").fetchall()
        chantiers = conn.execute("SELECT h.codename, h.status, c.codename AS client, h.title FROM synedre.chantiers h"
                                 " LEFT JOIN synedre.clients c ON c.id = h.client_id ORDER BY h.codename").fetchall()
    if founder is None:
        fail("the directory is empty: `synedre directory import FILE` loads one (see directory.example.json)")
    console.print(f"founder: {escape(founder['name'])} <{', '.join(founder['emails'])}>;"
                  f" Atlas mailbox {founder['atlas_address']}", soft_wrap=True)
    _listing([{k: str(v or "") for k, v in r.items()} for r in clients], whole=("codename", "status"),
             wide=wide, empty="no client")
    _listing([{k: str(v or "") for k, v in r.items()} for r in chantiers], whole=("codename", "status", "client"),
             wide=wide, empty="no chantier")


def _show_tenant(codename: str) -> None:
    """One client's tenant: what `./deploy` gets, where QA looks, which repository a launch
    clones and merges into on this host."""
    from synedre import db
    from synedre.spawn import repos

    s = get_settings()
    with db.transaction() as conn:
        row = conn.execute(
            """SELECT c.name, coalesce(t.deploy_target, c.deploy_target) AS target,
                      t.config->>'preprod_url' AS preprod, t.config->>'repo' AS repo
                 FROM synedre.clients c LEFT JOIN synedre.tenant_topology t ON t.client_id = c.id
                WHERE c.codename = %s""", (codename,)).fetchone()
    if row is None:
        fail(f"no client {codename!r} (`synedre directory show` lists them)")
    spec = row["repo"]
    if spec is None:
        repo = (f"{s.workspace_repo} (SYNEDRE_WORKSPACE_REPO, the fleet's default)" if s.workspace_repo
                else "none: each launch works in an empty scratch repository (SYNEDRE_WORKSPACE_REPO is unset)")
    elif (mirror := repos.locate(spec, s)) and (checkout := repos.locate(spec, s, repos.CHECKOUTS)) and mirror.remote:
        repo = f"{spec} (remote: this host's mirror {mirror.path}, its deploy checkout {checkout.path})"
    else:
        repo = f"{spec} (local path{'' if Path(spec, '.git').exists() else ', no git repository there on this host'})"
    for label, value in (("client", f"{codename} ({row['name']})"),
                         ("deploy target", row["target"] or "none (no deploy)"),
                         ("pre-production", row["preprod"] or "none (QA has nowhere to look)"),
                         ("repository", repo), ("base branch", s.workspace_base_branch)):
        console.print(f"{label}: {escape(value)}", soft_wrap=True)


@app.command()
def inspect(
    message: str | None = typer.Argument(None, help="Message-ID header value or internal id"),
    all_: bool = typer.Option(False, "--all", help="Every message (one line each)"),
    wide: bool = typer.Option(False, "--wide", help="With --all: long text whole (folded), intent and DKIM"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output, details included"),
) -> None:
    """Show a message: status, why it waits, every audit with its time and detail, its launches."""
    from synedre import db
    from synedre.db import messages

    if not all_ and not message:
        fail("give a MESSAGE or --all", USAGE)
    need_database()
    with db.transaction() as conn:
        ids: list[int] | None = None
        if not all_:
            assert message is not None
            mid = messages.lookup(conn, message)
            if mid is None:
                fail(f"no message {message!r}")
            ids = [mid]
        rows = messages.describe(conn, ids, details=not all_)
    if not all_:
        rows[0]["waiting"] = _waiting(rows[0])
    if as_json:
        sys.stdout.write(json.dumps(rows if all_ else rows[0], ensure_ascii=False, indent=1, default=str) + "\n")
    elif all_:
        _listing([{"id": str(r["id"]), "status": r["status"], "client": _client(r, False),
                   "subject": r["subject"] or "", "waiting": r["waiting_reason"] or "", "intent": _intent(r),
                   "dkim": r["dkim"] or "-"} for r in rows],
                 whole=("id", "status", "client"), wide=wide, wide_only=("intent", "dkim"), empty="no message")
    else:
        _describe(rows[0])


def _describe(r: dict[str, Any]) -> None:
    console.print(f"[bold]message {r['id']}[/] {escape(r['message_id'])}  from {escape(r['from'] or '?')}"
                  f"  dkim {escape(_dkim(r))}")
    console.print(f"subject: {escape(r['subject'] or '')}")
    done = r["materialized"]
    made = f"{done['kind']} #{done['id']}" if done else "-"
    console.print(f"status: [bold]{r['status']}[/]  intent: {_intent(r) or '-'}  client: {_client(r, True) or '-'}"
                  f"  materialized: {made}")
    if r["waiting"]:
        console.print(f"[yellow]waiting:[/] {escape(r['waiting'])}")
    console.print("audit:")
    for a in r["audit"]:
        detail = json.dumps(a["detail"], ensure_ascii=False, default=str) if a["detail"] else ""
        console.print(f"  {a['at'][:19]}  {a['event']}  {escape(detail)}", soft_wrap=True)
    if a := r.get("approval"):
        decided = f", {a['decided_by']} at {str(a['decided_at'])[:19]}" if a["decided_at"] else \
            f", expires {str(a['expires_at'])[:19]}"
        console.print(f"approval ({escape(a['rule'])}): {a['status']}{escape(decided)}"
                      + (f"; note: {escape(a['note'])}" if a["note"] else ""), soft_wrap=True)
    if v := r.get("recap_verdict"):
        console.print(f"recap verdict: {v['verdict']}" + (f"; note: {escape(v['note'])}" if v["note"] else ""),
                      soft_wrap=True)
    for launch in r["launches"]:
        console.print(f"launch #{launch['id']} attempt {launch['attempt']}: {launch['status']}"
                      f" ({launch['stop_reason'] or '-'}), model {launch['model']}, cost {launch['cost_usd']},"
                      f" session {launch['session_id'] or '-'}", soft_wrap=True)
        if launch.get("lesson_ids"):
            console.print(f"  lessons given: {', '.join(f'#{i}' for i in launch['lesson_ids'])}"
                          " (`synedre lessons` shows them)", soft_wrap=True)
        for key in ("contract", "salvage"):
            if launch.get(key):
                console.print(f"  {key}: {escape(json.dumps(launch[key], ensure_ascii=False, default=str))}",
                              soft_wrap=True)


def _dkim(r: dict) -> str:
    """pass, unsigned, or fail with its reason; `not checked` for mail never parsed."""
    if r["dkim"] == "fail":
        return f"fail ({r['dkim_reason']})"
    return r["dkim"] or "not checked"


def _intent(r: dict) -> str:
    if not r["intent"]:
        return ""
    return f"{r['intent']}/{r['complexity']} {r['confidence']:.2f}" if r["confidence"] is not None else r["intent"]


def _client(r: dict, source: bool) -> str:
    if not r["client"]:
        return ""
    codename = r["client"]["codename"] or "no client"
    return f"{codename} ({r['client']['source']})" if source else codename


def _waiting(r: dict) -> str | None:
    """Why the message is not moving now: its recorded reason, else its queue's consumers."""
    from synedre.pipeline import TERMINAL, consumer_of

    if r["status"] in TERMINAL:
        return None
    reason = r["waiting_reason"]
    if r.get("waiting_until"):
        reason = f"{reason} (until {str(r['waiting_until'])[:19]})"
    stage = consumer_of(r["status"])
    if stage is not None:
        from synedre.health import queue_consumers
        from tasks.app import app as celery

        consumers = queue_consumers(celery)
        if consumers is not None and consumers.get(stage.queue, 0) == 0:
            reason = "; ".join(filter(None, [reason, f"queue {stage.queue} has no consumer"]))
        elif reason is None:
            reason = f"queued for {stage.name}"
    return reason


@app.command()
def retry(
    message: str | None = typer.Argument(None, help="Message-ID header value or internal id"),
    from_stage: str | None = typer.Option(None, "--from", help=f"Stage to re-run: {', '.join(RETRY_STAGES)}"
                                                              " (default: the one whose failure it is in)"),
    status: Annotated[Status | None, typer.Option("--status", help="Every message at this status")] = None,
    since: str | None = typer.Option(None, help="With --status: only those there since (30m, 2h, 1d or an ISO date)"),
    reason: str = typer.Option(..., "--reason", help="Why, for the audit"),
) -> None:
    """Send messages back to a stage and enqueue them (audited `retry_requested`; one already
    at the stage's entry status is only enqueued again, audited `retry_requeued`)."""
    from synedre import db
    from synedre.db import messages

    if bool(message) == bool(status):
        fail("give a MESSAGE or --status STATUS", USAGE)
    if from_stage is not None and from_stage not in RETRY_STAGES:
        fail(f"--from {from_stage!r} is not a stage (stages: {', '.join(RETRY_STAGES)})", USAGE)
    after = _since(since)
    need_database()
    with db.transaction() as conn:
        if message:
            found = messages.lookup(conn, message)
            if found is None:
                fail(f"no message {message!r}")
            ids = [found]
        else:
            ids = messages.at_status(conn, str(status), after)
    if not ids:
        console.print(f"no message at {status}")
    sent = [_retry_one(mid, from_stage, reason) for mid in ids]  # one failure does not stop the batch
    if ids and not any(sent):
        raise typer.Exit(FAILED)


def _retry_one(mid: int, from_stage: str | None, reason: str) -> bool:
    """Send one message back and hand it to Celery, saying exactly what happened; False when
    it was refused or failed (nothing changed)."""
    from synedre import db, runner
    from tasks.app import enqueue

    try:
        with db.transaction() as conn:
            stage, old = runner.reenter(conn, mid, from_stage, reason=reason, by=_operator())
    except runner.RetryRefused as exc:
        err.print(f"[bold red]refused:[/] message {mid}: {escape(str(exc))}")
        return False
    except Exception as exc:
        err.print(f"[bold red]failed:[/] message {mid}: {escape(explain(exc)[1])}")
        return False
    moved = f"already at {old}" if old in stage.entry else f"{old} -> {stage.entry[0]}"
    try:
        queued = enqueue(stage.name, mid)
    except Exception as exc:  # the move is committed: say so, and who hands it on
        why = explain(exc)[1]
        with db.transaction() as conn:
            runner.set_waiting(conn, mid, f"enqueue pending: {why}")
        every = get_settings().sweep_every_s
        console.print(f"message {mid}: {moved}; enqueue pending: {escape(why)}. The sweep enqueues it for"
                      f" {stage.name} once Redis answers (every {every:g} s, for a message waiting over"
                      f" {stage.stuck_after_s} s)", soft_wrap=True)
        return True
    console.print(f"message {mid}: {moved}, " + (f"enqueued for {stage.name}" if queued
                                                  else f"already queued for {stage.name}"))
    return True


@app.command()
def approvals(as_json: bool = typer.Option(False, "--json", help="Machine-readable output"),
              wide: bool = typer.Option(False, "--wide", help="Long text whole (folded)")) -> None:
    """Launches waiting for the founder's OK: the message, the rule that asked, age, expiry."""
    from synedre import db

    need_database()
    with db.transaction() as conn:
        rows = conn.execute(
            """SELECT a.message_id, a.rule, a.token, a.created_at, a.expires_at, r.subject,
                      extract(epoch FROM now() - a.created_at)::bigint AS age_s
                 FROM synedre.approvals a JOIN synedre.raw_messages r ON r.id = a.message_id
                WHERE a.status = %s ORDER BY a.created_at""", (str(ApprovalStatus.WAITING),)).fetchall()
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    _listing([{"message": str(r["message_id"]), "age": f"{r['age_s'] // 60} min", "rule": r["rule"],
               "expires": str(r["expires_at"])[:16], "subject": r["subject"] or ""} for r in rows],
             whole=("message", "age", "expires"), wide=wide, empty="no request waits")


@app.command()
def approve(message: str = typer.Argument(..., help="Message-ID header value or internal id")) -> None:
    """Release a launch waiting for the founder's OK, as he would by replying OK (audited with
    your OS user), and hand it to the spawn queue."""
    _decide(message, approve=True, reason=None)


@app.command()
def refuse(message: str = typer.Argument(..., help="Message-ID header value or internal id"),
           reason: str = typer.Option(..., "--reason", help="Why: kept as the note, shown by inspect")) -> None:
    """End a message waiting for the founder's OK as `refused`, with the reason (audited)."""
    _decide(message, approve=False, reason=reason)


def _operator() -> str:
    """Who runs this command, for the audit: the real uid's name as the OS has it, never
    LOGNAME or USER (the caller sets those). Under sudo, root's record names the caller
    too (`root (sudo from alice)`); SUDO_USER is believed only when the real uid is 0,
    since anyone can set it."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no passwd entry (a container's): the number is the truth
        name = f"uid {uid}"
    sudo = os.environ.get("SUDO_USER") if uid == 0 else None
    return f"{name} (sudo from {sudo})" if sudo and sudo != name else name


def _decide(message: str, *, approve: bool, reason: str | None) -> None:
    from synedre import db
    from synedre.approvals import decisions
    from synedre.db import messages
    from tasks.app import enqueue

    need_database()
    by = f"operator:{_operator()}"
    with db.transaction() as conn:
        mid = messages.lookup(conn, message)
        if mid is None:
            fail(f"no message {message!r}")
        why = decisions.decide(conn, mid, approve=approve, by=by, note=reason)
        stage = decisions.released_stage(conn, mid)
    if why is not None:
        fail(f"message {mid}: nothing decided ({why.replace('_', ' ')})")
    if approve:
        enqueue(stage, mid)
    else:  # the reason becomes a lesson; if Redis cannot take it now, the sweep offers it later
        try:
            enqueue("learn", mid)
        except Exception as exc:  # noqa: BLE001 - the refusal stands; its lesson is the sweep's then
            console.print(f"the reason is learnt later ({type(exc).__name__})")
    done = f"approved, handed to {stage}" if approve else str(Status.REFUSED)
    console.print(f"message {mid}: {done} (by {by})")


def _since(value: str | None):
    from datetime import datetime, timedelta

    if value is None:
        return None
    units = {"m": "minutes", "h": "hours", "d": "days"}
    if value[:-1].isdigit() and value[-1] in units:
        return datetime.now(UTC) - timedelta(**{units[value[-1]]: int(value[:-1])})
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        fail(f"--since {value!r}: give 30m, 2h, 1d or an ISO date", USAGE)


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output")) -> None:
    """Messages per status, queue depths and consumers, launch switch, and every dependency's
    health; exits 3 when one the fleet needs fails (a warning does not), within seconds."""
    from synedre import health
    from tasks.app import app as celery

    snap = health.snapshot(app=celery)
    if as_json:
        sys.stdout.write(json.dumps(snap, ensure_ascii=False, indent=1, default=str) + "\n")
    else:
        _print_status(snap)
    if any(c["level"] == "fail" for c in snap["health"]):
        raise typer.Exit(DEPENDENCY)


def _print_status(snap: dict[str, Any]) -> None:
    msgs = snap["messages"]
    if "error" in msgs:
        console.print(f"[red]messages: {escape(msgs['error'])}[/]", soft_wrap=True)
    else:
        waiting = snap.get("waiting", {})
        console.print("messages: " + (", ".join(
            f"{k} {v}" + (f" ({waiting[k]} waiting)" if waiting.get(k) else "") for k, v in msgs.items() if v)
            + f" (total {sum(msgs.values())})" if any(msgs.values()) else "none"), soft_wrap=True)
        if any((dkim := snap.get("dkim") or {}).values()):
            console.print("dkim: " + ", ".join(f"{k} {v}" for k, v in dkim.items()))
    queues = snap["queues"]
    if "error" in queues:
        console.print(f"[red]queues: {escape(queues['error'])}[/]", soft_wrap=True)
    else:
        consumers = snap.get("consumers")
        console.print("queues: " + ", ".join(
            f"{q} {n}" + ("" if consumers is None else f"/{consumers.get(q, 0)}w") for q, n in queues.items())
            + ("  (depth/consumers)" if consumers is not None else "  (no worker answered)"), soft_wrap=True)
        launches = snap["launches"]
        console.print(f"launches: {'paused: ' + launches['paused'] if launches['paused'] else 'allowed'};"
                      f" slots {launches['slots_in_use']}/{launches['limit']}", soft_wrap=True)
    marks = {"ok": "[green]ok[/]", "warning": "[bold yellow]WARN[/]", "fail": "[bold red]FAIL[/]"}
    for c in snap["health"]:
        console.print(f"{marks[c['level']]} {c['name']}: {escape(c['detail'])}", soft_wrap=True)


@report_app.command("calibration")
def report_calibration(days: int = typer.Option(30, min=1, help="Window, in days"),
                       as_json: bool = typer.Option(False, "--json", help="Machine-readable output")) -> None:
    """The classifier's calibration report (markdown): per intent, counts, confidence, success of
    the launched work, and the autonomy gate (over 90 % success on at least 30 run and plan
    items launched; refused and expired approvals counted apart as its failures)."""
    from synedre import db
    from synedre.report.calibration import as_dict, collect, render

    need_database()
    with db.transaction() as conn:
        data = collect(conn, days=days)
    sys.stdout.write((json.dumps(as_dict(data), ensure_ascii=False, indent=1) if as_json else render(data)) + "\n")


@spawn_app.command("pause")
def spawn_pause(reason: str = typer.Option("operator", help="Why, for the record")) -> None:
    """Stop new launches fleet-wide (checked at the start of every launch; survives restarts)."""
    from synedre import kv
    from synedre.spawn import locks

    locks.pause(kv.client(), by=_operator(), reason=reason)
    console.print("launches paused")


@spawn_app.command("resume")
def spawn_resume() -> None:
    """Allow launches again; the messages held meanwhile are enqueued at once."""
    from synedre import kv
    from synedre.spawn import locks
    from tasks.spawn import offer_launches

    need_database()
    locks.resume(kv.client())
    console.print(f"launches resumed; {offer_launches()} held message(s) enqueued")


@spawn_app.command("status")
def spawn_status() -> None:
    """Is launching allowed, and how many slots are taken."""
    from synedre import kv
    from synedre.spawn import locks

    r = kv.client()
    s = get_settings()
    console.print_json(data={**locks.status(r), "env_disabled": s.spawn_disabled,
                             "disabled_reason": locks.spawn_disabled(r, s.spawn_disabled),
                             "slots_in_use": locks.LaunchSemaphore(r, limit=s.max_concurrent_launches).in_use(),
                             "limit": s.max_concurrent_launches})


@launch_app.command("resume")
def launch_resume(message: str = typer.Argument(..., help="Message-ID header value or internal id")) -> None:
    """Resume a message's last launch, stopped by a timeout (or the loss of its worker), in its
    recorded session: a spawn worker continues the same launch, with the same claim, caps and
    audit as a launch, its events going on in the same stream. Exits 1 when it cannot be resumed."""
    from synedre import db, kv
    from synedre.db import messages
    from synedre.spawn import locks as spawn_locks, session
    from synedre.stages import spawn as stage
    from tasks.app import app as celery

    need_database()
    with db.transaction() as conn:
        mid = messages.lookup(conn, message)
        if mid is None:
            fail(f"no message {message!r}")
        found = stage.resumable(conn, mid, get_settings())
        if isinstance(found, str):  # refused, audited with why
            messages.audit(conn, mid, "spawn_resume_skipped", reason=found, by="operator")
    if isinstance(found, str):
        fail(f"message {mid}: not resumable: {found}")
    if session.gone(get_settings().state_dir, found["id"], found["session_id"]):
        fail(f"message {mid}: not resumable: launch #{found['id']}'s session store is no longer on this host")
    if paused := spawn_locks.spawn_disabled(kv.client(), get_settings().spawn_disabled):
        fail(f"launches are paused ({paused}): `synedre spawn resume` first")
    celery.send_task("synedre.spawn_resume", args=[mid, found["id"], found["attempt"]])
    console.print(f"message {mid}: launch #{found['id']} (stopped: {found['stop_reason']}) enqueued to resume"
                  f" in its session; `synedre tail {mid}` follows it", soft_wrap=True)


@app.command()
def locks(stale_after: float = typer.Option(600.0, min=1, help="Seconds without renewal that count as stale")
          ) -> None:
    """Launch locks held too long without renewal (the watchdog's view); exits 1 if any."""
    from synedre import kv
    from synedre.spawn import locks as spawn_locks

    stale = spawn_locks.stale_locks(kv.client(), older_than_s=stale_after)
    console.print_json(data=stale)
    raise typer.Exit(FAILED if stale else OK)


@app.command("launches")
def list_launches(running: bool = typer.Option(False, "--running", help="Only running launches"),
                  message: str | None = typer.Option(None, "--message", help="Only this message's launches"),
                  wide: bool = typer.Option(False, "--wide", help="Every column, long text whole (folded)"),
                  as_json: bool = typer.Option(False, "--json", help="With contract, verdict, salvage, merge"),
                  asks: bool = typer.Option(False, "--asks", help="One-shot persona asks (synedre agent ask)"
                                                                  " instead of launches")) -> None:
    """Recent launches with their outcome (or the one-shot asks)."""
    from synedre import db
    from synedre.db import messages

    need_database()
    if asks:
        _list_asks(as_json, wide)
        return
    with db.transaction() as conn:
        mid = None
        if message:
            mid = messages.lookup(conn, message)
            if mid is None:
                fail(f"no message {message!r}")
        rows = [r for r in messages.launches_of(conn, mid) if not running or r["status"] == LaunchStatus.RUNNING]
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    _listing([{"id": str(r["id"]), "msg": str(r["message_id"]), "try": str(r["attempt"]), "status": r["status"],
               "started": r["started_at"].strftime("%m-%d %H:%M"), "stop": r["stop_reason"] or "",
               "cost": str(r["cost_usd"] or ""), "turns": str(r["num_turns"] or ""), "model": r["model"] or "",
               "prompt": r["system_prompt"] or "",
               "exit": str(r["exit_code"] if r["exit_code"] is not None else ""), "merge": str(r["merge"] or "")}
              for r in rows], whole=("id", "msg", "try", "status", "started"), wide=wide,
             wide_only=("turns", "model", "prompt", "exit", "merge"),
             empty="no running launch" if running else "no launch")


def _list_asks(as_json: bool, wide: bool) -> None:
    from synedre import agents as roster_mod, db

    with db.transaction() as conn:
        rows = roster_mod.recent_asks(conn)
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    _listing([{"id": str(r["id"]), "agent": r["agent_codename"], "via": r["via"], "status": r["status"],
               "started": r["started_at"].strftime("%m-%d %H:%M"), "cost": str(r["cost_usd"] or ""),
               "model": r["model"] or "", "tokens": f"{r['input_tokens'] or 0}+{r['output_tokens'] or 0}"}
              for r in rows], whole=("id", "agent", "via", "status", "started"), wide=wide, empty="no ask")


@app.command()
def tail(message: str = typer.Argument(..., help="Message-ID header value or internal id"),
         follow: bool = typer.Option(True, help="Keep following until the launch ends"),
         interval: float = typer.Option(1.0, min=0.1, help="Seconds between reads")) -> None:
    """Follow a message's latest launch events live from the database, like tail -f."""
    import time

    from synedre import db
    from synedre.db import messages

    seen = -1
    need_database()
    with db.transaction() as conn:
        mid = messages.lookup(conn, message)
        if mid is None:
            fail(f"no message {message!r}")
        launch = conn.execute("SELECT id, status FROM synedre.launches WHERE message_id = %s"
                              " ORDER BY attempt DESC LIMIT 1", (mid,)).fetchone()
        if launch is None:
            state = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (mid,)).fetchone()
            fail(f"message {mid} has no launch (status {state['status'] if state else '?'})")
    while True:
        with db.transaction() as conn:
            launch = conn.execute("SELECT id, status FROM synedre.launches WHERE id = %s", (launch["id"],)).fetchone()
            assert launch is not None  # a launch row is never deleted
            rows = conn.execute(
                "SELECT seq, event_type, subtype, tool_name, payload FROM synedre.launch_events"
                " WHERE launch_id = %s AND seq > %s ORDER BY seq", (launch["id"], seen)).fetchall()
        for r in rows:
            seen = r["seq"]
            if r["event_type"] == "stream_event":
                continue
            console.print(f"{r['seq']:5d} {r['event_type']}{'/' + r['subtype'] if r['subtype'] else ''}"
                          f"{' ' + r['tool_name'] if r['tool_name'] else ''} {escape(_summary(r['payload']))}")
        if not follow or launch["status"] != LaunchStatus.RUNNING:
            if seen < 0:
                console.print(f"launch #{launch['id']} ({launch['status']}) has no event")
            return
        time.sleep(interval)


def _summary(payload: dict) -> str:
    content = (payload.get("message") or {}).get("content") or []
    for block in content if isinstance(content, list) else []:
        if block.get("type") == "tool_use":
            return json.dumps(block.get("input"), ensure_ascii=False)[:100]
        if block.get("type") == "text":
            return block.get("text", "")[:100]
        if block.get("type") == "tool_result":
            return str(block.get("content"))[:100]
    if payload.get("type") == "result":
        return f"{payload.get('subtype')} turns={payload.get('num_turns')} cost={payload.get('total_cost_usd')}"
    return ""


@app.command()
def poll(mailbox: str = typer.Argument("atlas", help="The mailbox's id in the registry (SYNEDRE_MAILBOXES_FILE)"),
         wait: bool = typer.Option(False, help="Run here and now instead of enqueueing")) -> None:
    """Ask for a poll of a mailbox (the same task beat and IDLE trigger)."""
    from imapclient.exceptions import IMAPClientError

    from synedre import mailboxes
    from synedre.mailboxes import RegistryError
    from synedre.oauth import TokenUnavailable

    try:
        box = mailboxes.get(mailbox)  # an unknown mailbox is refused here, not in a worker
    except RegistryError as exc:
        fail(str(exc), USAGE)
    if not wait:
        from tasks.app import app as celery
        console.print(f"enqueued {celery.send_task('synedre.poll', args=[mailbox]).id}")
        return
    import logging

    from tasks.poll import poll as poll_task

    need_database()
    if get_settings().log_level != "DEBUG":  # the failure is said once below, not as the task's traceback
        logging.getLogger("celery.app.trace").setLevel(logging.CRITICAL)
    try:  # one attempt, here and now: a worker's retries are the worker's
        result = poll_task.apply(args=[mailbox], retries=poll_task.max_retries).get()
    except TokenUnavailable as exc:
        raise Unavailable(f"mailbox {mailbox}: {exc}: check the network and the provider's status") from exc
    except (OSError, IMAPClientError) as exc:
        raise Unavailable(f"IMAP of mailbox {mailbox} ({box.imap_host}:{box.imap_port}) did not answer"
                          f" ({type(exc).__name__}: {' '.join(str(exc).split())}): check the server, and the"
                          " mailbox's entry in SYNEDRE_MAILBOXES_FILE") from exc
    if "login_refused" in result:  # it answered, and said no
        fail(result["login_refused"], DEPENDENCY)
    console.print_json(data=result)


@mailbox_app.command("authorize")
def mailbox_authorize(
    mailbox: str = typer.Argument(..., help="The mailbox's id in the registry"),
    flow: Literal["device", "code"] | None = typer.Option(
        None, "--flow", help="device: a code to enter on the provider's page (Microsoft's default); code: an"
                             " address to open, the browser's answer pasted back (Google's default)"),
) -> None:
    """Obtain the OAuth2 refresh token of an `auth = "oauth2"` mailbox and store it (mode 0600) in
    the file its refresh_token_file names; then log in with it. Works on a headless server. For
    Microsoft 365 app-only access (app_only = true) there is none to store: it checks the grant."""
    from synedre import mailboxes, oauth

    try:
        box = mailboxes.get(mailbox)
    except mailboxes.RegistryError as exc:
        fail(str(exc), USAGE)
    cfg = box.oauth2
    if cfg is None:
        fail(f"mailbox {mailbox} logs in with a password (password_env): there is nothing to authorize", USAGE)
    if not cfg.app_only and cfg.refresh_token_file is None:
        fail(f"mailbox {mailbox}: name a refresh_token_file in [mailboxes.{mailbox}.oauth2]: the token is stored"
             " there (a variable cannot be written)", USAGE)
    try:
        if cfg.app_only:
            box.access_token(fresh=True)
            console.print(f"app-only access: the token endpoint granted a token for {box.username};"
                          " there is no refresh token to store")
        else:
            assert cfg.refresh_token_file is not None
            token = _authorize_flow(box, cfg, flow or _default_flow(cfg))
            if not token.get("refresh_token"):
                fail(f"mailbox {mailbox}: the provider gave no refresh token (ask for offline access:"
                     " Microsoft's offline_access scope)")
            oauth.store_refresh_token(cfg.refresh_token_file, str(token["refresh_token"]))
            console.print(f"refresh token stored in {cfg.refresh_token_file} (mode 0600)")
    except oauth.AuthorizeError as exc:
        fail(f"mailbox {mailbox}: {exc}")
    except oauth.TokenRefused as exc:
        fail(f"mailbox {mailbox}: {exc}")
    except oauth.TokenUnavailable as exc:
        fail(f"mailbox {mailbox}: {exc}", DEPENDENCY)
    except oauth.SecretMissing as exc:
        fail(f"mailbox {mailbox}: {exc}", USAGE)
    with box.session() as client:  # LoginRefused: one line and exit 3, through the one error path
        client.select_folder(box.folder, readonly=True)
    console.print(f"{box.imap_server}: login as {box.username} ok (XOAUTH2)")


def _default_flow(cfg: Any) -> Literal["device", "code"]:
    if cfg.provider == "google":
        return "code"  # Google's device flow does not grant the mail scope
    return "device" if cfg.endpoints().device_authorization_url else "code"


def _authorize_flow(box: Any, cfg: Any, flow: Literal["device", "code"]) -> dict[str, Any]:
    from synedre import oauth

    if flow == "device":
        code = oauth.start_device(cfg)
        console.print(f"To let Synedre use mailbox {box.id}, open {code.verification_uri} in a browser, sign in"
                      f" as {box.username} and enter the code {code.user_code}"
                      f" (within {code.expires_in / 60:.0f} min). Waiting…")
        return oauth.poll_device(cfg, code)
    request = oauth.authorization_request(cfg)
    console.print(f"Open this address in a browser, sign in as {box.username} and allow access:", soft_wrap=True)
    console.print(request.url, soft_wrap=True, markup=False, highlight=False)
    console.print(f"The browser then fails to load {oauth.PASTE_REDIRECT_URI}…: copy that whole address from its"
                  " address bar and paste it here (the code alone will do).", soft_wrap=True)
    return oauth.exchange_code(cfg, request, typer.prompt("address", prompt_suffix=": "))


@app.command()
def idle() -> None:
    """Watch every registered mailbox with IMAP IDLE and trigger polls (run by the fleet)."""
    import signal

    from synedre import mailboxes
    from synedre.ingest.idle import watch_all
    from tasks.app import app as celery

    try:
        boxes = list(mailboxes.load().values())
    except mailboxes.RegistryError as exc:
        fail(str(exc), USAGE)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    expires = get_settings().poll_interval_s
    failed = watch_all(boxes, lambda box: celery.send_task("synedre.poll", args=[box], expires=expires), stop)
    if failed and not stop.is_set():
        # Every watcher has given up (a server without IDLE; a refused login is retried in
        # place after the mailbox backoff): exit so the fleet restarts us after its own.
        fail(f"IDLE watcher stopped for {', '.join(failed)}; see the idle_failed log lines", DEPENDENCY)


@app.command()
def flower(address: str | None = typer.Option(None, help="Interface to listen on (default: SYNEDRE_FLOWER_ADDRESS,"
                                                         " itself 127.0.0.1)"),
           port: int | None = typer.Option(None, help="Port (default: SYNEDRE_FLOWER_PORT, itself 5555)")) -> None:
    """Flower, the Celery dashboard: on 127.0.0.1 by default, never without authentication.

    Credentials (user:password) come from FLOWER_BASIC_AUTH or the file SYNEDRE_FLOWER_AUTH_FILE names.
    They reach Flower through its environment, never its command line; without them it exits 2."""
    s = get_settings()
    auth, why = s.flower_auth()
    if auth is None:  # its API can send tasks, hence launch agents
        fail(f"{why}: Flower never runs without authentication", USAGE)
    argv = [sys.executable, "-m", "celery", "-A", "tasks", "flower",
            f"--address={address or s.flower_address}", f"--port={port or s.flower_port}"]
    # The credentials go through the environment, which Flower reads itself: never in
    # argv, which every user of the machine can read in /proc.
    os.execve(sys.executable, argv, {**os.environ, "FLOWER_BASIC_AUTH": auth.get_secret_value()})


@app.command()
def metrics(address: str = typer.Option("127.0.0.1", help="Interface to listen on"),
            port: int = typer.Option(9808, min=1, max=65535, help="Port")) -> None:
    """A Prometheus endpoint (/metrics): messages per status, stage durations, launches by outcome,
    spend today against the cap, queue depths and the kill switch, read at each scrape."""
    from synedre import metrics as endpoint

    need_database()
    endpoint.serve(address, port)


@app.command()
def fleet(grace: float = typer.Option(120.0, help="Seconds running tasks get to finish on stop"),
          with_flower: bool = typer.Option(False, "--flower", help="Also run Flower (as `synedre flower`)")) -> None:
    """Run everything: migrations, then beat, the workers and the IDLE watcher (and Flower)."""
    s = get_settings()
    _registry_or_fail()  # read only: a mistaken registry leaves no state directory behind
    claim = _claim_state_dir(s)  # before anything that writes: a second fleet must touch nothing
    code = run_fleet(s, grace, with_flower)
    claim.close()
    raise typer.Exit(code)


def _claim_state_dir(s: Settings) -> Any:
    """This process as the state directory's one fleet (the lock held while the returned
    file stays open), else one line naming the fleet that runs, exit 1."""
    from synedre import fleet as fleet_mod

    try:
        return fleet_mod.claim_state_dir(s.state_dir)
    except fleet_mod.FleetRunning as exc:
        fail(str(exc))


def run_fleet(s: Settings, grace: float, with_flower: bool = False,
              ready: Callable[[], None] | None = None) -> int:
    """The fleet's run, from its checks to its stop; the caller holds the state directory.
    `ready` runs once the database is migrated, before the checks and the workers (the
    try-out imports its directory there). The embedded database is stopped at the end only
    if this run started it: one another process started (`synedre db upgrade`, a test) is
    left as it was found."""
    from synedre import db, fleet as fleet_mod
    from synedre.db.migrate import MigrationError, upgrade

    boxes = _fleet_preflight(s, with_flower)
    embedded = not s.database_url
    started = [embedded and not db.embedded_running(s)]
    try:  # a Ctrl-C (or a failure) during the start stops the database too, if this run started it
        env = dict(os.environ, SYNEDRE_DATABASE_URL=db.database_url(s))
        try:
            done = upgrade(s.migrations_dir, env["SYNEDRE_DATABASE_URL"])
        except MigrationError as exc:
            fail(str(exc))
        if ready is not None:
            ready()
        from synedre import health

        for c in health.check_all(s):
            if c.level != "ok":
                err.print(f"[bold yellow]{c.level}:[/] {c.name}: {escape(c.detail)}")
        console.print(f"[green]database ready[/] ({len(done)} migration(s) applied); "
                      f"mailboxes: {', '.join(boxes)}; Ctrl-C stops everything cleanly")

        def restart_loop(child: str, restarts: int, window_s: float) -> None:
            from synedre import incidents

            incidents.safely(incidents.restart_loop(child, restarts, window_s))

        return fleet_mod.supervise(fleet_mod.children(flower=with_flower), env, grace,
                                   watch=_dependency_watch(s, embedded, started), on_restart_loop=restart_loop)
    finally:
        if started[0]:
            if db.stop_embedded(s):
                console.print("embedded database stopped")
        elif embedded:
            console.print("embedded database left running (started by another command; `synedre db stop`"
                          " stops it)")


def _registry_or_fail() -> dict[str, Any]:
    """The mailbox registry with every password it names, or one line and exit 2."""
    from synedre import mailboxes

    try:
        boxes = mailboxes.load()
        for box in boxes.values():
            box.check_secrets()
    except mailboxes.RegistryError as exc:
        fail(str(exc), USAGE)
    return boxes


def _fleet_preflight(s: Settings, with_flower: bool) -> dict[str, Any]:
    """What the fleet cannot start without, each refused in one line: the mailboxes and
    their passwords, Flower's credentials when asked for, the approval policy, a reachable Redis."""
    from synedre import kv

    boxes = _registry_or_fail()
    if with_flower and (why := s.flower_auth()[1]):
        fail(f"--flower: {why}: Flower never runs without authentication", USAGE)
    from synedre.approvals import policy

    try:  # a policy the fleet cannot read would hold (or release) launches nobody meant to
        policy.load(s.approval_policy_file)
    except policy.PolicyError as exc:
        fail(f"SYNEDRE_APPROVAL_POLICY_FILE: {exc}", USAGE)
    kv.client().ping()  # Redis down: one line and exit 3, through the one error path
    return boxes


def _dependency_watch(s: Settings, embedded: bool, started: list[bool]) -> Callable[[], None]:
    """The supervisor's periodic check: the embedded database restarted if it died (then
    this fleet started it: `started`), an incident for a dependency down longer than
    DEPENDENCY_DOWN_S."""
    import time

    from synedre import db, health, incidents
    from synedre.log import log

    down_since: dict[str, float] = {}
    checked_at = [0.0]

    def watch_database() -> None:
        if embedded and db.ensure_embedded(s):
            started[0] = True
            log.error("embedded_database_restarted", pgdata=str(db.embedded_pgdata(s)))
        now = time.monotonic()
        if now - checked_at[0] < DEPENDENCY_CHECK_S:
            return
        checked_at[0] = now
        for c in (health.check_postgres(), health.check_redis(), health.check_clamd(s)):
            if c.ok or "WARNING" in c.detail:  # a warning is a configuration matter, not an outage
                down_since.pop(c.name, None)
                continue
            since = down_since.setdefault(c.name, now)
            if now - since >= DEPENDENCY_DOWN_S:  # coalesced by kind and hour in incidents
                incidents.safely(incidents.dependency_down(c.name, now - since))
    return watch_database


# The keys a try-out needs, and what each one is for.
TRY_KEYS = {"SYNEDRE_MISTRAL_API_KEY": "the classifier", "SYNEDRE_ANTHROPIC_API_KEY": "the agent"}


def _missing_keys(s: Settings) -> list[str]:
    return [var for var in TRY_KEYS if s.resolve_key(var.split("_")[1].lower())[0] is None]


def _keys_line(missing: list[str]) -> str:
    """One line naming every key the try-out lacks, and what waits meanwhile."""
    return (f"no LLM key: set {' and '.join(f'{v} ({TRY_KEYS[v]})' for v in missing)}, then start `make try`"
            " again; until then a request waits in classify saying which key it lacks (`synedre inspect --all`),"
            " then ends classify_failed (`synedre retry` sends it back)")


@try_app.command("run")
def try_run(grace: float = typer.Option(30.0, help="Seconds running tasks get to finish on stop")) -> None:
    """Start the try-out's mailbox, mail sink, example client and clamd under the state directory,
    then the fleet (what `make try` runs); Ctrl-C stops everything."""
    from synedre import tryout

    s = get_settings()
    claim = _claim_state_dir(s)  # one fleet per state directory, a try-out's included
    if missing := _missing_keys(s):
        err.print(f"[bold yellow]warning:[/] {escape(_keys_line(missing))}", soft_wrap=True)
    try:
        running = tryout.start(s.state_dir, missing)
    except (tryout.dovecot.DovecotError, OSError) as exc:
        fail(f"the try-out could not start: {exc}", DEPENDENCY)
    try:
        os.environ.update(running.env)  # the fleet's children inherit it
        get_settings.cache_clear()
        code = run_fleet(get_settings(), grace, ready=lambda: _try_ready(running))
    finally:
        running.stop()
    claim.close()
    raise typer.Exit(code)


def _try_ready(running: Any) -> None:
    """The try-out's directory imported (again: its ports may have changed), and what runs where."""
    from synedre import db, tryout
    from synedre.db.directory import import_directory, parse_file

    where = running.layout
    with db.transaction() as conn:
        import_directory(conn, parse_file(where.directory.read_bytes()))
    scan = (f"clamd on {running.clamd.address}, {running.clamd.database}" if running.clamd else
            f"no clamd ({running.clamd_error}): every message with an attachment will be blocked")
    console.print(
        f"try-out in {where.root}:\n"
        f"  Atlas's mailbox   IMAP 127.0.0.1:{running.mailbox.port} (Dovecot; {where.mailboxes})\n"
        f"  founder's inbox   {where.sink} (`synedre try inbox`)\n"
        f"  example client    {tryout.CLIENT} in {where.repo}, pre-production {running.preprod_url}\n"
        f"  scanner           {scan}\n"
        f"send the sample request from another terminal: .venv/bin/synedre try send", soft_wrap=True)


@try_app.command("send")
def try_send(file: Annotated[Path | None, typer.Argument(
        help="An email (.eml) to deliver; by default the shipped sample, a forwarded request")] = None) -> None:
    """Deliver an email to the try-out's Atlas mailbox (by default the shipped sample request)."""
    from imapclient.exceptions import IMAPClientError

    from synedre import tryout

    s = get_settings()
    try:
        raw = file.read_bytes() if file is not None else tryout.sample_request()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", USAGE)
    try:
        tryout.deliver(s.state_dir, raw)
    except FileNotFoundError as exc:
        fail(str(exc), DEPENDENCY)
    except (OSError, IMAPClientError) as exc:
        fail(f"the try-out's mailbox did not take it ({type(exc).__name__}: {exc}): is `make try` running?",
             DEPENDENCY)
    console.print(f"delivered {file or 'the sample request'} to Atlas's inbox: `synedre inspect --all` follows it;"
                  " the founder's mail lands in `synedre try inbox`", soft_wrap=True)
    if missing := tryout.layout(s.state_dir).saved().get("missing_keys"):  # the try-out's, not this terminal's
        err.print(f"[bold yellow]warning:[/] {escape(_keys_line(missing))}", soft_wrap=True)


@try_app.command("inbox")
def try_inbox(number: Annotated[int | None, typer.Argument(help="A mail's number: show it (text, images)")] = None,
              approve: bool = typer.Option(False, "--approve",
                                           help="With an approval request's NUMBER: give the founder's OK"
                                                " (as `synedre approve`)")) -> None:
    """The founder's mail from the try-out (recaps, alerts, approval requests), one line each;
    with NUMBER, that mail's text, its images saved beside it."""
    from synedre import tryout
    from synedre.tryout import sink

    folder = tryout.layout(get_settings().state_dir).sink
    mails = {m.number: m for m in sink.read(folder)}
    if number is None:
        if approve:
            fail("--approve needs the NUMBER of an approval request", USAGE)
        if not mails:
            console.print(f"no mail yet in {folder}")
        for m in mails.values():
            console.print(f"{m.number:4d}  {m.message['Date'] or ''}  {m.kind:<10} message {m.about or '-':<5}"
                          f" {escape(str(m.message['Subject'] or ''))}", soft_wrap=True)
            if m.kind.startswith("approval") and m.kind != "approval-expired":
                console.print(f"      to approve: synedre try inbox {m.number} --approve")
        return
    mail = mails.get(number)
    if mail is None:
        fail(f"no mail {number} in {folder} ({len(mails)} there)")
    if approve:
        if not mail.kind.startswith("approval") or mail.kind == "approval-expired" or mail.about is None:
            fail(f"mail {number} is a {mail.kind}, not an approval request")
        return _decide(str(mail.about), approve=True, reason=None)
    for header in ("From", "To", "Date", "Subject"):
        console.print(f"{header}: {escape(str(mail.message[header] or ''))}", soft_wrap=True)
    console.print()
    console.print(escape(mail.text().rstrip()), soft_wrap=True)
    images = mail.images()
    if images:
        beside = folder / f"{number:04d}"
        beside.mkdir(exist_ok=True)
        for name, data in images:
            (beside / Path(name).name).write_bytes(data)
        console.print(f"\nimages: {', '.join(str(beside / Path(n).name) for n, _ in images)}", soft_wrap=True)


lessons_app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                          invoke_without_command=True,
                          help="What the agents learnt from the founder (his NON, his refusals, escalations).")
app.add_typer(lessons_app, name="lessons")


@lessons_app.callback()
def lessons_list(ctx: typer.Context,
                 client: str | None = typer.Option(None, "--client",
                                                   help="Only this client's (and the global) lessons"),
                 retired: bool = typer.Option(False, "--retired", help="Retired lessons too"),
                 wide: bool = typer.Option(False, "--wide", help="Every column, long text whole (folded)"),
                 as_json: bool = typer.Option(False, "--json", help="Machine-readable, provenance included")) -> None:
    """List the lessons with where each came from and how often it was given to a launch."""
    from synedre import db
    from synedre.db import lessons

    if ctx.invoked_subcommand is not None:
        return
    need_database()
    with db.transaction() as conn:
        rows = lessons.listing(conn, _client_id(conn, client) if client else None, retired=retired)
    if as_json:
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1, default=str) + "\n")
        return
    _listing([{"id": str(r["id"]), "client": r["client"] or "(all)", "agent": r["agent"] or "(all)",
               "said": str(r["times_said"]), "given": str(r["times_given"]),
               "from": ", ".join(f"{p['kind']} of message {p['message_id']}" if p["message_id"] else p["kind"]
                                 for p in r["provenance"]) or "-",
               "lesson": f"{r['title']}: {r['body']}" + (" (retired)" if r["retired_at"] else "")}
              for r in rows], whole=("id", "client", "agent", "said", "given"), wide=wide, wide_only=("agent",),
             empty="no lesson")


def _client_id(conn: Any, codename: str) -> int:
    row = conn.execute("SELECT id FROM synedre.clients WHERE codename = %s", (codename,)).fetchone()
    if row is None:
        fail(f"no client {codename!r} (`synedre directory show` lists them)", USAGE)
    return int(row["id"])


@lessons_app.command("add")
def lessons_add(text: str = typer.Argument(..., help="The lesson, in the words the agent should read"),
                client: str | None = typer.Option(None, "--client", help="For this client's launches"),
                for_all: bool = typer.Option(False, "--global", help="For every client's launches"),
                agent: str | None = typer.Option(None, "--agent", help="Only this agent's (CODENAME)")) -> None:
    """Add a lesson by hand (redacted, embedded, deduplicated like the founder's)."""
    from synedre import db
    from synedre.db import lessons as sql
    from synedre.orchestrate import lessons

    if bool(client) == for_all:
        fail("give --client CODENAME or --global (one of them)", USAGE)
    need_database()
    with db.transaction() as conn:
        client_id = _client_id(conn, client) if client else None
        agent_id = None
        if agent:
            row = conn.execute("SELECT id FROM synedre.agents WHERE codename = %s", (agent,)).fetchone()
            if row is None:
                fail(f"no agent {agent!r} (`synedre agents` lists them)", USAGE)
            agent_id = row["id"]
        source = sql.note_operator(conn, client_id, agent_id, text)
    done = lessons.learn(source, get_settings())
    if not done.startswith("lesson_"):
        with db.transaction() as conn:
            conn.execute("DELETE FROM synedre.lesson_sources WHERE id = %s AND learnt_at IS NULL", (source,))
        fail(f"not added: {done}", DEPENDENCY)
    event, lesson_id = done.split()
    said = "said again (it was there already)" if event == "lesson_said_again" else "added"
    console.print(f"lesson {lesson_id}: {said}")


@lessons_app.command("retire")
def lessons_retire(lesson_id: int = typer.Argument(..., help="The lesson's id (`synedre lessons` lists them)")) -> None:
    """Retire a lesson: no launch is given it again (it stays listed with --retired)."""
    from synedre import db
    from synedre.db import lessons

    need_database()
    with db.transaction() as conn:
        if not lessons.retire(conn, lesson_id):
            fail(f"no live lesson {lesson_id} (retired already, or no such id)")
    console.print(f"lesson {lesson_id}: retired")


agent_app = _typer("One agent answers one question, outside any launch.")
app.add_typer(agent_app, name="agent")


@app.command("agents")
def agents_roster(family: str | None = typer.Option(None, "--family", help="Only this family (group_name)"),
                  domain: str | None = typer.Option(None, "--domain",
                                                    help="Only agents configured for this prompt domain"),
                  as_json: bool = typer.Option(False, "--json", help="Machine-readable output"),
                  wide: bool = typer.Option(False, "--wide", help="Long text whole (folded)"),
                  check: bool = typer.Option(False, "--check",
                                             help="Report stored orbits that disagree with the family's ring;"
                                                  " exit 1 if any")) -> None:
    """The agent roster: stored orbit and display ring side by side, prompt-domain routing."""
    from synedre import agents as roster_mod, db

    need_database()
    try:
        with db.transaction() as conn:
            rows = roster_mod.roster(conn, family=family, domain=domain)
            routed = roster_mod.route_domain(conn, domain) if domain else None
    except roster_mod.RosterError as exc:
        fail(str(exc), USAGE)
    if check:
        rows = roster_mod.disagreements(rows)
    records = [{**a.as_record(), **({"routed": a == routed} if domain else {})} for a in rows]
    if as_json:
        sys.stdout.write(json.dumps(records, ensure_ascii=False, indent=1) + "\n")
    elif check and not rows:
        console.print("every stored orbit agrees with its family's ring")
    else:
        _listing([{"codename": a.codename, "nickname": a.nickname, "family": a.family,
                   "orbite": Text(str(a.orbite)) if a.orbit_agrees else Text(f"{a.orbite} (ring {a.ring})", "bold red"),
                   "ring": str(a.ring), "active": "yes" if a.active else "no", "role": a.role,
                   "domains": ", ".join(a.prompt_domains)} for a in rows],
                 whole=("codename", "family", "orbite", "ring", "active"), wide=wide, empty="no agent")
        if domain:
            console.print(f"domain {domain} -> {routed.codename} ({escape(routed.nickname)})" if routed
                          else f"domain {domain} -> no active agent")
    if check and rows:
        err.print(f"{len(rows)} agent(s) whose stored orbit disagrees with their family's ring: "
                  + ", ".join(a.codename for a in rows))
        raise typer.Exit(FAILED)


@agent_app.command("ask")
def agent_ask(codename: str = typer.Argument(..., help="The agent's codename (`synedre agents` lists them)"),
              question: str = typer.Argument(..., help="The question, in quotes"),
              via: Literal["facade", "claude"] = typer.Option(
                  "facade", "--via", help="facade: the AI facade; claude: a short `claude -p`"),
              as_json: bool = typer.Option(False, "--json", help="The answer with its journal row")) -> None:
    """One persona answers one question, journalled with its cost (shown by `synedre launches --asks`)."""
    from synedre import agents as roster_mod, db

    need_database()
    with db.transaction() as conn:  # an unknown name costs nothing: refused before any embedding
        known = conn.execute("SELECT 1 FROM synedre.agents WHERE codename = %s AND active", (codename,)).fetchone()
    if known is None:
        fail(f"no active agent {codename!r} (`synedre agents` lists them)", USAGE)
    try:
        result = roster_mod.ask(codename, question, via=via)
    except (LookupError, roster_mod.RosterError) as exc:
        fail(str(exc), USAGE)
    except roster_mod.AskRefused as exc:
        fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps({**result.__dict__, "cost_usd": str(result.cost_usd)},
                                    ensure_ascii=False, indent=1) + "\n")
        return
    sys.stdout.write(result.answer.rstrip() + "\n")
    err.print(f"ask {result.ask_id}: {result.provider}/{result.model}, {result.input_tokens}+{result.output_tokens}"
              f" tokens, {result.cost_usd} USD")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
