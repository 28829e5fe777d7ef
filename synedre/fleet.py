"""`synedre fleet`: beat, one worker per queue group and the IDLE watcher, supervised."""
from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from synedre.log import log

RESTART_BACKOFF_MAX_S = 30.0
# A child that died this often within the window is restarting in a loop: an incident.
RESTART_LOOP_COUNT, RESTART_LOOP_WINDOW_S = 5, 600.0
_PR_SET_PDEATHSIG = 1


LOCK_FILE = "fleet.lock"


class FleetRunning(RuntimeError):
    """Another fleet holds this state directory (its database, its attachments, its agents)."""


def claim_state_dir(state_dir: Path) -> IO[str]:
    """Make this process the state directory's one fleet: an exclusive lock on
    `<state dir>/fleet.lock`, which holds the pid, kept as long as the returned file is open
    (keep it for the process's life). The kernel releases it when the process ends, however
    it ends, so a crash leaves no stale lock behind."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fh = open(state_dir / LOCK_FILE, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _pid_in(fh)
        fh.close()
        raise FleetRunning(f"a fleet already runs on {state_dir} (pid {pid}): one fleet per state directory;"
                           " stop that one first (Ctrl-C), or set another SYNEDRE_STATE_DIR") from None
    fh.truncate(0)
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def running_fleet(state_dir: Path) -> str | None:
    """The pid of the fleet running on this state directory, if one does."""
    try:
        fh = open(state_dir / LOCK_FILE)
    except FileNotFoundError:
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_in(fh)
    return None


def _pid_in(fh: IO[str]) -> str:
    fh.seek(0)
    return fh.read().strip() or "?"  # "?" in the instant between its lock and its write


def _stop_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it if the supervisor dies, even by SIGKILL,
    so no worker outlives its fleet (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    backoff: float = 1.0
    restart_at: float = 0.0
    started_at: float = field(default=0.0)
    deaths: list[float] = field(default_factory=list)

    def start(self, env: dict[str, str]) -> None:
        # Own session: a terminal Ctrl-C reaches only the supervisor, which then stops
        # each child once, cleanly (Celery's warm shutdown finishes running tasks).
        self.proc = subprocess.Popen(self.argv, env={**env, **self.env}, start_new_session=True,
                                     preexec_fn=_stop_with_parent)
        self.started_at = time.monotonic()
        log.info("fleet_child_started", child=self.name, pid=self.proc.pid)


def worker_argv(g, node: str) -> list[str]:
    return [sys.executable, "-m", "tasks", "worker", "--loglevel", "INFO",
            "-Q", ",".join(g.queues), "-c", str(g.concurrency), "-P", g.pool, "-n", node]


def worker_env(g) -> dict[str, str]:
    # a thread pool holds one database connection per thread, plus a spare
    return {"SYNEDRE_DB_POOL_MAX": str(g.concurrency + 2)} if g.pool == "threads" else {}


def children(flower: bool = False) -> list[Child]:
    py = sys.executable
    out = [Child("beat", [py, "-m", "tasks", "beat", "--loglevel", "INFO",
                          "-S", "redbeat.RedBeatScheduler"]),
           Child("idle", [py, "-m", "synedre.cli", "idle"])]
    if flower:  # `synedre flower` execs Flower: loopback, credentials only in its environment
        out.append(Child("flower", [py, "-m", "synedre.cli", "flower"]))
    from synedre.celeryconfig import GROUPS  # not the tasks: the supervisor stays ~10 MiB smaller

    for name, g in GROUPS.items():
        for i in range(1, g.processes + 1):
            out.append(Child(f"{name}-{i}", worker_argv(g, f"{name}-{i}@%h"), worker_env(g)))
    return out


WATCH_EVERY_S = 2.0


def supervise(kids: list[Child], env: dict[str, str], grace_s: float,
              watch: Callable[[], None] | None = None,
              on_restart_loop: Callable[[str, int, float], None] | None = None) -> int:
    """Run the children, restart any that dies (with backoff), call `watch` every
    WATCH_EVERY_S (the embedded database's watchdog), and stop everything on a signal."""
    stopping = False
    watched_at = 0.0

    def _stop(signum, _frame):
        nonlocal stopping
        if stopping:
            return
        stopping = True
        log.info("fleet_stopping", signal=signal.Signals(signum).name, grace_s=grace_s)

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    for k in kids:
        k.start(env)
    while not stopping:
        time.sleep(0.5)
        now = time.monotonic()
        if watch is not None and now - watched_at >= WATCH_EVERY_S:
            watched_at = now
            try:
                watch()
            except Exception as exc:  # a failing watchdog must not take the fleet down
                log.error("fleet_watch_failed", error=f"{type(exc).__name__}: {exc}"[:200])
        for k in kids:
            if k.proc and k.proc.poll() is not None and not stopping:
                # A child that ran a while before dying starts again from a short backoff.
                k.backoff = 1.0 if now - k.started_at > 60 else min(k.backoff * 2, RESTART_BACKOFF_MAX_S)
                log.error("fleet_child_exited", child=k.name, code=k.proc.returncode,
                          restart_in_s=k.backoff)  # the delay it really waits
                k.restart_at, k.proc = now + k.backoff, None
                k.deaths = [d for d in k.deaths if now - d < RESTART_LOOP_WINDOW_S] + [now]
                if on_restart_loop is not None and len(k.deaths) >= RESTART_LOOP_COUNT:
                    try:
                        on_restart_loop(k.name, len(k.deaths), RESTART_LOOP_WINDOW_S)
                    except Exception as exc:  # telling must not take the fleet down
                        log.error("fleet_restart_loop_unreported", child=k.name, error=type(exc).__name__)
            elif k.proc is None and now >= k.restart_at:
                k.start(env)
    for k in kids:
        if k.proc and k.proc.poll() is None:
            k.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for k in kids:
        if k.proc is None:
            continue
        try:
            k.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("fleet_child_killed", child=k.name, reason="grace period over")
            os.killpg(k.proc.pid, signal.SIGKILL)
            k.proc.wait()
    log.info("fleet_stopped")
    return 0
