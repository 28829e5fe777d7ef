"""The CLI is quiet and fits: no info line on an ordinary call; listings whose ids, statuses
and codenames stay whole at 80 columns, long text cut with a visible mark, everything whole
with --wide or piped to a file."""
from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from synedre.pipeline import LaunchStatus, Status
from tests.services import stack

pytestmark = pytest.mark.timeout(120)

CODENAME = "atelier-moreau-renovation"
WAITING = "held: launches paused (paused by operator at 2026-12-01T09:51:16+0000: quarterly audit of the fleet)"
SUBJECT = "Devis pour la rénovation complète de la cuisine et de la salle de bain du deuxième étage"
STOP_REASON = "agent_user_unavailable"
MODEL = "claude-sonnet-4-5-20250929-with-a-long-route-name"
STATUSES = ("blocked_unsafe_attachment", "materialized", "spawn_failed")
LAUNCH_STATUSES = (str(LaunchStatus.SANDBOX_UNAVAILABLE), str(LaunchStatus.SUCCEEDED))


@pytest.fixture
def listed(db):
    """Messages at long statuses, a client, a long subject and waiting reason, and two
    launches with long statuses: what the listings must show whole or cut visibly."""
    with psycopg.connect(db, autocommit=True) as conn:
        client = conn.execute("INSERT INTO synedre.clients (codename, name) VALUES (%s, 'Atelier Moreau')"
                              " RETURNING id", (CODENAME,)).fetchone()[0]
        ids = []
        for n, (status, reason) in enumerate([(Status.BLOCKED_UNSAFE_ATTACHMENT, None),
                                              (Status.MATERIALIZED, WAITING),
                                              (Status.SPAWN_FAILED, None)], 1):
            mid = conn.execute(
                "INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, subject, raw, size)"
                " VALUES ('atlas', 1, %s, %s, %s, 'x', 1) RETURNING id",
                (n, f"<m{n}@atelier-moreau.fr>", SUBJECT)).fetchone()[0]
            # via a status every migration's CHECK admits, then the one under test
            conn.execute("INSERT INTO synedre.email_states (message_id, status, intent, complexity, confidence,"
                         " client_id, client_source) VALUES (%s, 'classified', 'run', 'plan', 0.91, %s, 'envelope')",
                         (mid, client))
            conn.execute("UPDATE synedre.email_states SET status = %s, waiting_reason = %s WHERE message_id = %s",
                         (str(status), reason, mid))
            ids.append(mid)
        for attempt, status in enumerate(LAUNCH_STATUSES, 1):
            conn.execute("INSERT INTO synedre.launches (message_id, attempt, status, model, system_prompt, exit_code,"
                         " stop_reason, num_turns, cost_usd) VALUES (%s, %s, %s, %s, 'rich+plan', 1, %s, 12, 0.4200)",
                         (ids[2], attempt, status, MODEL, STOP_REASON))
    return {"url": db, "ids": ids}


def synedre(*argv: str, columns: int | None = None) -> tuple[str, str]:
    """`synedre ARGV | cat`: stdout is a pipe, not a terminal; COLUMNS gives a terminal's width."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = str(columns)
    out = subprocess.run([sys.executable, "-m", "synedre.cli", *argv], capture_output=True, text=True, env=env,
                         cwd=stack.ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout, out.stderr


def test_listings_piped_to_a_file_keep_every_column_whole_on_one_line(listed):
    text, errors = synedre("inspect", "--all")
    assert len(text.splitlines()) == 2 + 3  # header, rule, one line per message
    for status in STATUSES:
        assert f" {status} " in text, text
    assert text.count(CODENAME) == 3 and WAITING in text and text.count(SUBJECT) == 3
    assert "…" not in text
    assert errors == ""  # quiet: no info line on an ordinary call

    text, errors = synedre("launches")
    for whole in (*LAUNCH_STATUSES, STOP_REASON, MODEL, "rich+plan"):
        assert whole in text, text
    assert "…" not in text and errors == ""


def row_lines(text: str) -> list[str]:
    """The lines that start a row: they begin with its id."""
    return [line for line in text.splitlines() if line[:1].isdigit()]


@pytest.mark.parametrize("wide", [False, True], ids=["default", "wide"])
def test_at_80_columns_every_status_and_codename_is_whole_and_long_text_cut_visibly(listed, wide):
    flag = ["--wide"] if wide else []
    text, _ = synedre("inspect", "--all", *flag, columns=80)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    starts = row_lines(text)
    assert len(starts) == 3
    for line, status in zip(starts, STATUSES, strict=True):
        assert f" {status} " in line and f" {CODENAME}" in line, text  # whole, on the row's own line
    if wide:  # nothing cut: the long text whole under its row, wrapped at spaces
        joined = " ".join(line.strip() for line in text.splitlines())
        assert "…" not in text and WAITING in joined and joined.count(SUBJECT) == 3
    else:  # one line per message; subject and waiting reason cut with the mark
        assert len(text.splitlines()) == 2 + 3 and SUBJECT not in text and WAITING not in text
        assert all("Devis" in line and "…" in line for line in starts)
        assert "held:" in starts[1]

    text, _ = synedre("launches", *flag, columns=80)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    starts = row_lines(text)
    assert [s for s in LAUNCH_STATUSES if any(f" {s} " in line for line in starts)] == list(LAUNCH_STATUSES), text
    assert (MODEL in " ".join(text.split())) is wide  # the model only with --wide


def test_wide_at_a_wide_terminal_shows_long_text_whole(listed):
    text, _ = synedre("inspect", "--all", "--wide", columns=250)
    assert WAITING in text and text.count(SUBJECT) == 3 and "run/plan 0.91" in text
    text, _ = synedre("launches", "--wide", columns=250)
    assert MODEL in text and STOP_REASON in text


def test_empty_listings_say_so(db):
    assert synedre("inspect", "--all")[0] == "no message\n"
    assert synedre("launches")[0] == "no launch\n"
    assert synedre("launches", "--running")[0] == "no running launch\n"
    assert synedre("launches", "--asks")[0] == "no ask\n"


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
    assert "sandbox_unavailable" in out.stdout  # the command ran as usual


@pytest.mark.integration
def test_the_embedded_database_hint_is_said_once_when_the_database_is_created(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SYNEDRE_DATABASE_URL"}
    env["SYNEDRE_STATE_DIR"] = str(tmp_path / "state")

    def cli(*argv: str) -> str:
        out = subprocess.run([sys.executable, "-m", "synedre.cli", *argv], env=env, cwd=stack.ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stderr
    try:
        first = cli("db", "upgrade")
        assert "embedded_database" in first and "SYNEDRE_DATABASE_URL" in first
        assert cli("db", "url") == ""  # the next call, on the running database: nothing to say
    finally:
        subprocess.run([sys.executable, "-m", "synedre.cli", "db", "stop"], env=env, cwd=stack.ROOT,
                       capture_output=True, timeout=60)


def test_tail_of_a_launch_without_events_says_so(listed):
    text, _ = synedre("tail", str(listed["ids"][2]), "--no-follow")
    assert text == "launch #2 (succeeded) has no event\n"


def test_agents_and_directory_show_have_wide_too(db):
    """The README's listings all take --wide: at 80 columns the roster's role and a client's
    pre-production URL are cut without it, whole with it, and no line is longer than 80."""
    assert subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", "directory.example.json"],
                          cwd=stack.ROOT, env=dict(os.environ), capture_output=True, timeout=60).returncode == 0
    for argv, whole in ((["agents"], "Orchestrateur général"),
                        (["directory", "show"], "https://preprod.boulangerie-dupont.example")):
        cut, _ = synedre(*argv, columns=80)
        wide, _ = synedre(*argv, "--wide", columns=80)
        assert whole not in cut and "…" in cut, cut
        table = [line.rstrip() for line in wide.splitlines() if not line.startswith("founder:")]  # a sentence
        assert whole in wide and max(map(len, table)) <= 80, wide
