"""How the fleet runs git on a repository (`run`, `output`): as itself, or as the agent inside
a clone the agent owns, and serialised per repository across processes (`repo_lock`)."""
from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from synedre.spawn.launcher import RunAs

GIT_TIMEOUT_S = 120.0  # a checkout of a large tree takes a while; a hung git must not
LOCK_TIMEOUT_S = 60.0
_LOCK_POLL_S = 0.05


class WorkspaceError(RuntimeError):
    """A git command failed, timed out or could not start; the message carries stderr."""


# Git run as the agent reads no configuration but the repository's own (the agent's).
AS_AGENT_ENV = {"HOME": "/nonexistent", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
# What the fleet sets on every git command it runs inside a clone: a hook or an fsmonitor the
# agent configured there never runs (command-line configuration wins over the repository's).
IN_CLONE = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


def run(cwd: Path, *args: str, ok: tuple[int, ...] = (0,), timeout: float = GIT_TIMEOUT_S,
         as_user: RunAs | None = None) -> subprocess.CompletedProcess[str]:
    """The one way the fleet runs git; exit codes outside `ok` raise `WorkspaceError`.
    `as_user`: run it as that user (inside a repository the agent owns)."""
    who = ({"user": as_user.uid, "group": as_user.gid, "extra_groups": [],
            "env": {**os.environ, **AS_AGENT_ENV}} if as_user else {})
    proc = completed(["git", "-C", str(cwd), *args], f"git {' '.join(args)}", timeout, text=True, **who)
    if proc.returncode not in ok:
        detail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]  # merge reports conflicts on stdout
        raise WorkspaceError(f"git {' '.join(args)}: exit {proc.returncode}: {detail}")
    return proc


def completed(cmd: list[str], what: str, timeout: float, **popen: Any) -> subprocess.CompletedProcess[Any]:
    """`cmd` run to its end, its output captured; a timeout or a git that cannot start raises
    `WorkspaceError` naming `what`. The exit code is the caller's to judge."""
    try:
        return subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, **popen)
    except subprocess.TimeoutExpired as exc:
        raise WorkspaceError(f"{what}: timed out after {timeout:g} s") from exc
    except OSError as exc:
        raise WorkspaceError(f"{what}: {exc}") from exc


def output(cwd: Path, *args: str, as_user: RunAs | None = None) -> str:
    return run(cwd, *args, as_user=as_user).stdout.strip()


@contextmanager
def repo_lock(repo: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Serialise git operations on one repository across processes and threads.

    A file lock (flock on `<git dir>/synedre.lock`) rather than a Redis lock: clones are
    made on the same host as the repository's working tree, so the host's kernel is the
    right arbiter, and it releases the lock when a holder dies (no TTL to tune). git's
    own `index.lock`/ref locks make a concurrent command fail instead of waiting.
    Raises `WorkspaceError` after `timeout_s`.
    """
    git_dir = Path(output(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    with file_lock(git_dir / "synedre.lock", timeout_s, f"{repo}: repository lock busy for {timeout_s:g} s"):
        yield


@contextmanager
def file_lock(path: Path, timeout_s: float, busy: str) -> Iterator[None]:
    """An exclusive flock on `path` (made if missing), waited for up to `timeout_s`, then
    `WorkspaceError(busy)`. The kernel releases it when its holder dies."""
    deadline = time.monotonic() + timeout_s
    with open(path, "a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise WorkspaceError(busy) from None
                time.sleep(_LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
