"""The CLI is quiet and wide: no info line on an ordinary call, and listings that fold long
cells instead of cutting them, piped to a file or in a narrow terminal."""
from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
from rich.console import Console
from typer.testing import CliRunner

from synedre.pipeline import Status
from tests.services import stack

CODENAME = "ATELIER-MOREAU-RENOVATION-ENERGETIQUE-LYON-SUD"
WAITING = "held: launches paused (paused by operator at 2026-12-01T09:51:16+0000: quarterly audit of the fleet)"
STOP_REASON = "agent_user_unavailable"
MODEL = "claude-sonnet-4-5-20250929-with-a-long-route-name"
LISTINGS = (["inspect", "--all"], ["launches"])


@pytest.fixture
def listed(db):
    """Messages at long statuses, a client with a long codename, a long waiting reason and
    a failed launch: what the listings must show whole."""
    with psycopg.connect(db, autocommit=True) as conn:
        client = conn.execute("INSERT INTO synedre.clients (codename, name) VALUES (%s, 'Atelier Moreau')"
                              " RETURNING id", (CODENAME,)).fetchone()[0]
        ids = []
        for n, (status, reason) in enumerate([(Status.BLOCKED_UNSAFE_ATTACHMENT, None),
                                              (Status.MATERIALIZED, WAITING),
                                              (Status.SPAWN_FAILED, None)], 1):
            mid = conn.execute(
                "INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, subject, raw, size)"
                " VALUES ('atlas', 1, %s, %s, 'Devis pour la rénovation', 'x', 1) RETURNING id",
                (n, f"<m{n}@atelier-moreau.fr>")).fetchone()[0]
            # via a status every migration's CHECK admits, then the one under test
            conn.execute("INSERT INTO synedre.email_states (message_id, status, intent, complexity, confidence,"
                         " client_id, client_source) VALUES (%s, 'classified', 'run', 'plan', 0.91, %s, 'envelope')",
                         (mid, client))
            conn.execute("UPDATE synedre.email_states SET status = %s, waiting_reason = %s WHERE message_id = %s",
                         (str(status), reason, mid))
            ids.append(mid)
        conn.execute("INSERT INTO synedre.launches (message_id, attempt, status, model, system_prompt, exit_code,"
                     " stop_reason, num_turns, cost_usd) VALUES (%s, 1, %s, %s, 'rich+plan', 1, %s, 12, 0.4200)",
                     (ids[2], str(Status.SPAWN_FAILED), MODEL, STOP_REASON))
    return {"url": db, "ids": ids}


def _run(argv: list[str], tmp_path, name: str) -> tuple[str, str]:
    """`synedre ARGV > file`: stdout is a file, not a terminal, as in a pipe."""
    out, errors = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    with open(out, "w") as stdout, open(errors, "w") as stderr:
        code = subprocess.run([sys.executable, "-m", "synedre.cli", *argv], stdout=stdout, stderr=stderr,
                              env=dict(os.environ), cwd=stack.ROOT, timeout=60).returncode
    assert code == 0, errors.read_text()
    return out.read_text(), errors.read_text()


def test_listings_piped_to_a_file_keep_every_status_codename_and_reason_whole(listed, tmp_path):
    text, errors = _run(["inspect", "--all"], tmp_path, "inspect")
    for status in ("blocked_unsafe_attachment", "materialized", "spawn_failed"):
        assert f" {status} " in text, text
    assert text.count(CODENAME) == 3 and WAITING in text
    assert "…" not in text
    assert errors == ""  # quiet: no info line on an ordinary call

    text, errors = _run(["launches"], tmp_path, "launches")
    for whole in ("spawn_failed", STOP_REASON, MODEL, "rich+plan"):
        assert whole in text, text
    assert "…" not in text and errors == ""


def _cells(table_text: str) -> list[list[str]]:
    """Each row's cells, the lines of a folded cell joined back (ids never wrap, so a new
    id starts a new row); spaces dropped, as a wrap may have cut at one."""
    rows: list[list[str]] = []
    for line in table_text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            rows.append(cells)
        elif rows:
            rows[-1] = [a + b for a, b in zip(rows[-1], cells, strict=True)]
    return [[c.replace(" ", "") for c in row] for row in rows]


@pytest.mark.parametrize("argv", LISTINGS, ids=lambda a: " ".join(a))
def test_listings_in_a_narrow_terminal_fold_cells_but_never_cut_them(listed, argv, monkeypatch):
    from synedre import cli

    screen = Console(width=60, record=True, force_terminal=False, color_system=None, file=open(os.devnull, "w"))
    monkeypatch.setattr(cli, "console", screen)
    result = CliRunner().invoke(cli.app, argv)
    assert result.exit_code == 0, result.output
    text = screen.export_text()
    assert max(len(line) for line in text.splitlines()) <= 60
    assert "…" not in text
    rows = _cells(text)
    assert len(rows) == (3 if argv[0] == "inspect" else 1)
    if argv[0] == "inspect":
        assert [r[1] for r in rows] == ["blocked_unsafe_attachment", "materialized", "spawn_failed"]
        assert all(CODENAME in r[4] for r in rows)
        assert rows[1][6] == WAITING.replace(" ", "")
    else:
        assert rows[0][3] == "spawn_failed" and rows[0][9] == STOP_REASON and rows[0][4] == MODEL


@pytest.mark.parametrize("verbose", [False, True])
def test_verbose_logs_at_debug_here_and_in_the_processes_it_starts(listed, verbose):
    # No command logs at DEBUG on its own: the probe line after the call shows the level it
    # left, and the environment is what the fleet's children inherit.
    probe = ("import os, sys; from synedre.cli import app; from synedre.log import log; "
             "app(sys.argv[1:], standalone_mode=False); log.debug('debug_probe'); "
             "print(os.environ.get('SYNEDRE_LOG_LEVEL'))")
    out = subprocess.run([sys.executable, "-c", probe, *(["--verbose"] if verbose else []), "launches"],
                         env=dict(os.environ, SYNEDRE_LOG_LEVEL="INFO"), cwd=stack.ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("debug_probe" in out.stderr) is verbose
    assert out.stdout.splitlines()[-1] == ("DEBUG" if verbose else "INFO")
    assert "spawn_failed" in out.stdout  # the command ran as usual


@pytest.mark.integration
def test_the_embedded_database_hint_is_said_once_when_the_database_is_created(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SYNEDRE_DATABASE_URL"}
    env["SYNEDRE_STATE_DIR"] = str(tmp_path / "state")

    def db_url() -> str:
        out = subprocess.run([sys.executable, "-m", "synedre.cli", "db", "url"], env=env, cwd=stack.ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stderr
    try:
        first = db_url()
        assert "embedded_database" in first and "SYNEDRE_DATABASE_URL" in first
        assert db_url() == ""  # the second call, on the running database: nothing to say
    finally:
        subprocess.run([sys.executable, "-m", "synedre.cli", "db", "stop"], env=env, cwd=stack.ROOT,
                       capture_output=True, timeout=60)
