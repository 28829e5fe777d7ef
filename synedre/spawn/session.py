"""A launch's Claude Code session, kept so that a stopped launch can be resumed (`--resume`).

The CLI persists the session (its transcript, its tool results, its shell snapshots) in its
config directory, which spawn/agent.py sets to `<agent home>/.claude`: the launch's own home
(`<state>/agent/<launch id>/home`, the agent user's, 0700, inside a directory nobody but root
lists), written under the launch's private umask. No other place holds it: the fleet's own
home is never used, and nothing of it enters the database or the NDJSON stream (the launch
row records the session id alone).

Beside it, in the fleet's private launch directory, the launch keeps its fence token: a
resumed run renders the same system prompt, naming the token its first request was fenced
with (synedre/spawn/prompt.py).

The CLI also keeps there what the session has cost so far (`cost`): a resumed run starts from
it and its `result` reports the session's total, so the launch's spending budget
(SYNEDRE_MAX_BUDGET_USD) is shared by all its runs (synedre/stages/spawn.py `budget_left`).

The store goes (`remove`) once no resume can need it (`prune`): its message reached a
terminal status other than a resumable `spawn_failed`, a later launch of the message
replaced it, or it ended more than SYNEDRE_SESSION_RETENTION_H ago.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from synedre.db.types import Conn
from synedre.log import log
from synedre.pipeline import TERMINAL, LaunchStatus, Status

STORE = ".claude"
TOKEN_NAME = "fence-token"
RM_TIMEOUT_S = 120.0
STOPS = {"idle": "idle timeout (no output for too long)", "hard": "hard timeout",
         "budget": "launch time budget", "worker_lost": "loss of its worker"}


def store(home: Path) -> Path:
    """The session store inside an agent home (CLAUDE_CONFIG_DIR)."""
    return home / STORE


def home_of(state_dir: Path, launch_id: int) -> Path:
    """The launch's agent home (the layout of spawn/agent.py `dirs`)."""
    return (state_dir / "agent").resolve() / str(launch_id) / "home"


def has_session(state_dir: Path, launch_id: int, session_id: str) -> bool:
    """Whether this host holds the session's transcript (read as root: the agent's files)."""
    return any(store(home_of(state_dir, launch_id)).glob(f"projects/*/{session_id}.jsonl"))


def gone(state_dir: Path, launch_id: int, session_id: str) -> bool:
    """Whether this host ran the launch (its agent home is here, and readable) and its session
    is no longer there; False when another host ran it, or this process cannot tell."""
    home = home_of(state_dir, launch_id)
    return os.access(home, os.R_OK | os.X_OK) and not has_session(state_dir, launch_id, session_id)


# The CLI's record of a session's running cost in its transcript (one line per save, the last one
# counts; it saves it as it exits, a SIGTERM included): {"type": "cost-state", "totalCostUSD": …}.
COST_STATE = b'"cost-state"'


def cost(state_dir: Path, launch_id: int, session_id: str) -> float | None:
    """What the session has cost so far by the CLI's own account (the total it starts a resumed
    run from), None when its transcript is not here or records none: a run stopped before its
    `result` event (idle, hard timeout) has only this to tell what it spent."""
    found = None
    for transcript in store(home_of(state_dir, launch_id)).glob(f"projects/*/{session_id}.jsonl"):
        with transcript.open("rb") as fh:
            for line in fh:
                if COST_STATE not in line:
                    continue
                try:
                    total = json.loads(line).get("totalCostUSD")
                except (ValueError, AttributeError):
                    continue
                if isinstance(total, (int, float)) and not isinstance(total, bool) and total >= 0:
                    found = float(total)
    return found


def keep_token(base: Path, token: str) -> None:
    """The launch's fence token, 0600 in its fleet-private directory, for a resumed run."""
    fd = os.open(base / TOKEN_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token)


def read_token(base: Path) -> str | None:
    try:
        return (base / TOKEN_NAME).read_text().strip() or None
    except FileNotFoundError:
        return None


def resume_prompt(stopped_by: str | None, contract_path: str) -> str:
    """The request of a resumed run: the conversation is the session's, this only says why it
    goes on (our own words, nothing of the email)."""
    why = STOPS.get(stopped_by or "", "a stop")
    return (f"[Synedre] Your previous run of this task was stopped by the {why} before it ended. "
            "Continue the same task from where you stopped: your work so far is in the workspace "
            "(check `git status` and `git log`). Finish it, commit, and write the contract file at "
            f"{contract_path} as the system prompt says.")


def remove(state_dir: Path, launch_id: int) -> bool:
    """Delete the launch's session store and its token; True when something was removed."""
    target = store(home_of(state_dir, launch_id))
    token = (state_dir / "launches").resolve() / str(launch_id) / TOKEN_NAME
    found = target.exists() or token.exists()
    if target.exists():  # the agent user's files: rm as the fleet, never following a link out
        subprocess.run(["rm", "-rf", "--one-file-system", str(target)], check=True, timeout=RM_TIMEOUT_S)
    token.unlink(missing_ok=True)
    return found


def local_launches(state_dir: Path) -> list[int]:
    """The launches whose session store is on this host."""
    area = (state_dir / "agent").resolve()
    try:
        names = [e.name for e in os.scandir(area) if e.name.isdigit()]
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if store(area / n / "home").exists())


def expired(conn: Conn, launch_ids: list[int], retention_h: float) -> list[int]:
    """Of these launches, those no resume can need any more: ended, and their message at a
    terminal status (but a `spawn_failed` whose last launch is resumable), or moved on to a
    later launch, or ended over `retention_h` ago. A running launch is never listed."""
    if not launch_ids:
        return []
    rows = conn.execute(
        """SELECT l.id FROM synedre.launches l JOIN synedre.email_states s ON s.message_id = l.message_id
            WHERE l.id = ANY(%(ids)s) AND l.status <> %(running)s AND (
                  l.ended_at < now() - make_interval(secs => %(secs)s)
               OR l.attempt <> s.launch_attempt
               OR (s.status = ANY(%(terminal)s) AND NOT (s.status = %(failed)s
                   AND coalesce(l.salvage->>'resumable', 'false') = 'true')))""",
        {"ids": launch_ids, "running": str(LaunchStatus.RUNNING), "secs": float(retention_h) * 3600,
         "terminal": [str(x) for x in TERMINAL], "failed": str(Status.SPAWN_FAILED)}).fetchall()
    return [r["id"] for r in rows]


def prune(state_dir: Path, retention_h: float) -> list[int]:
    """Remove the session stores on this host that no resume can need (`expired`): the sweep,
    and every spawn worker at start (a store is on the disk of the host that ran its launch)."""
    from synedre import db

    local = local_launches(state_dir)
    if not local:
        return []
    with db.transaction() as conn:
        gone = expired(conn, local, retention_h)
    removed = []
    for launch_id in gone:
        try:
            if remove(state_dir, launch_id):
                removed.append(launch_id)
        except (OSError, subprocess.SubprocessError) as exc:  # one stuck store must not block the rest
            log.warning("session_remove_failed", launch_id=launch_id, error=str(exc))
    if removed:
        log.info("sessions_removed", launches=removed)
    return removed
