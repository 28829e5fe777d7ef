"""Where a secret must never show: any process's command line (readable by every user of the
machine in /proc), a dump of the database, the logs. `CommandLines` samples every process's
argv while a test runs; `pg_dump` dumps the fleet's schema with its data; `assert_absent`
looks for each secret in each text."""
from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import psutil


class CommandLines:
    """Every distinct command line seen on the machine, sampled every `every_s` from start to stop."""

    def __init__(self, every_s: float = 0.1):
        self.seen: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._every_s = every_s
        self._thread = threading.Thread(target=self._run, name="cmdlines", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in psutil.process_iter(["cmdline"]):
                cmd = p.info.get("cmdline")
                if cmd:
                    self.seen.add("\0".join(cmd))
            self.samples += 1
            self._stop.wait(self._every_s)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def text(self) -> str:
        return "\n".join(sorted(self.seen))


def pg_dump(url: str) -> str:
    """The `synedre` schema, definitions and rows, as pg_dump writes it."""
    import pgserver

    pg_dump_bin = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
    out = subprocess.run([str(pg_dump_bin), "--schema=synedre", "--no-owner", url], capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout


def assert_absent(secrets: list[str], **texts: str) -> None:
    """No secret in any text; the failure names where, never prints the secret whole."""
    assert secrets and all(len(s) >= 8 for s in secrets), "nothing to look for"
    for where, text in texts.items():
        assert text, f"{where}: empty, nothing was checked"
        found = [s[:6] + "…" for s in secrets if s in text]
        assert not found, f"secret(s) {found} found in {where}"
