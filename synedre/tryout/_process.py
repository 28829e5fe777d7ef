"""Stopping a try-out service, started in a session of its own."""
from __future__ import annotations

import os
import signal
import subprocess


def stop(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, then, after `grace_s`, SIGKILL to its whole group: its children share its session."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
