"""Running the fleet (`synedre fleet`: migrations, beat, the workers, the IDLE watcher), and
its dashboards: Flower and the Prometheus endpoint."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.markup import escape

from synedre.cli.common import USAGE, console, err, fail, need_database
from synedre.config import Settings, get_settings

# `synedre fleet` looks at its dependencies this often; one down this long is an incident.
DEPENDENCY_CHECK_S, DEPENDENCY_DOWN_S = 30.0, 300.0


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


def metrics(address: str = typer.Option("127.0.0.1", help="Interface to listen on"),
            port: int = typer.Option(9808, min=1, max=65535, help="Port")) -> None:
    """A Prometheus endpoint (/metrics): messages per status, stage durations, launches by outcome,
    spend today against the cap, queue depths and the kill switch, read at each scrape."""
    from synedre import metrics as endpoint

    need_database()
    endpoint.serve(address, port)


def fleet(grace: float = typer.Option(120.0, help="Seconds running tasks get to finish on stop"),
          with_flower: bool = typer.Option(False, "--flower", help="Also run Flower (as `synedre flower`)")) -> None:
    """Run everything: migrations, then beat, the workers and the IDLE watcher (and Flower)."""
    s = get_settings()
    _registry_or_fail()  # read only: a mistaken registry leaves no state directory behind
    claim = claim_state_dir(s)  # before anything that writes: a second fleet must touch nothing
    code = run_fleet(s, grace, with_flower)
    claim.close()
    raise typer.Exit(code)


def claim_state_dir(s: Settings) -> Any:
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
