"""What the throwaway daemons in tests/services (clamd, Dovecot) share: a probed port, a base
directory they may own, a stop that leaves no process of their session behind, and the
give-up-or-retry step after a start that did not come up."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

# The probed port is released before the daemon binds it, so another process may take it
# first: a start is tried this many times, each on a fresh port.
PORT_ATTEMPTS = 3


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_dir_or_temp(base_dir: Path | None, prefix: str) -> tuple[Path, bool]:
    """``base_dir`` (created if missing), or a fresh temp dir if None; resolved, and whether
    the caller owns it (it is then removed on stop)."""
    owns = base_dir is None
    root = Path(tempfile.mkdtemp(prefix=prefix)) if base_dir is None else Path(base_dir)
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve(), owns


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM ``proc`` and give it ``grace_s`` seconds, then SIGKILL its whole process group
    (its children share the session ``start_new_session=True`` gave it) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@dataclass(kw_only=True)
class ServiceProcess:
    """Base of a service dataclass: its daemon, the directory it runs in, and whether ``stop``
    removes that directory; ``stop_grace_s`` is how long ``stop`` waits after SIGTERM before
    it kills the process group."""

    base_dir: Path
    process: subprocess.Popen | None = field(default=None, repr=False)
    owns_base_dir: bool = field(default=False, repr=False)
    stop_grace_s: ClassVar[float] = 5.0

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None:
            atexit.unregister(self.stop)
            stop_process_group(proc, self.stop_grace_s)
        if self.owns_base_dir:
            self.owns_base_dir = False
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def stop_failed_start(self, detail: str, error: str, attempt: int) -> None:
        """Stop a start that did not come up, keeping its files until ``detail`` is read; return
        (retry on a fresh port) if the port was taken and attempts remain, else remove an owned
        base dir and raise ``RuntimeError(error)``."""
        owned, self.owns_base_dir = self.owns_base_dir, False
        self.stop()
        if "Address already in use" in detail and attempt < PORT_ATTEMPTS - 1:
            return
        if owned:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        raise RuntimeError(error)
