"""The try-out's clamd: Debian's ClamAV daemon on a loopback port, its configuration under
`<state dir>/try/clamd`, with the machine's signature database when freshclam has filled it,
else a local one holding only the EICAR test signature (so that the scan stage runs, and
says what it found; real malware would pass: run `freshclam` for the real database)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from synedre.tryout import _process

SYSTEM_DATABASE = Path("/var/lib/clamav")
# The EICAR test file, built from its hex form so that this file is not itself flagged.
EICAR_HEX = ("58354f2150254041505b345c505a58353428505e2937434329377d2445494341522d5354414e"
             "444152442d414e544956495255532d544553542d46494c452124482b482a")
CONFIG = """\
Foreground yes
TCPSocket {port}
TCPAddr 127.0.0.1
DatabaseDirectory {database}
TemporaryDirectory {root}/tmp
LogFile {root}/clamd.log
OfficialDatabaseOnly no
SelfCheck 0
StreamMaxLength 100M
MaxScanSize 100M
MaxFileSize 100M
ScanArchive yes
AlertExceedsMax yes
"""
# The full database takes a while to load (and about 1 GB of memory).
START_TIMEOUT_S = 120.0


class ClamdError(RuntimeError):
    pass


@dataclass
class Clamd:
    address: str  # host:port, as SYNEDRE_CLAMD takes it
    database: str  # what it scans with, in words
    process: subprocess.Popen

    def stop(self) -> None:
        _process.stop(self.process, 10)


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"zPING\0")
            return s.recv(16).rstrip(b"\0\n") == b"PONG"
    except OSError:
        return False


def start(root: Path, port: int) -> Clamd:
    binary = shutil.which("clamd") or "/usr/sbin/clamd"
    if not os.path.exists(binary):
        raise ClamdError("clamd is not installed (Debian's clamav-daemon: `make system` installs it)")
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    if any(SYSTEM_DATABASE.glob("*.c[lv]d")):
        database, words = SYSTEM_DATABASE, f"ClamAV's database in {SYSTEM_DATABASE}"
    else:
        database = root / "db"
        database.mkdir(exist_ok=True)
        (database / "eicar.ndb").write_text(f"Eicar-Test-Signature:0:*:{EICAR_HEX}\n")
        words = (f"the EICAR test signature only ({SYSTEM_DATABASE} is empty: `freshclam` fills it, then"
                 " restart the try-out)")
    conf = root / "clamd.conf"
    conf.write_text(CONFIG.format(port=port, database=database, root=root))
    with open(root / "clamd.stderr", "wb") as err:
        process = subprocess.Popen([binary, "--foreground", f"--config-file={conf}"], stdin=subprocess.DEVNULL,
                                   stdout=err, stderr=err, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:
        if _pong(port):
            return Clamd(f"127.0.0.1:{port}", words, process)
        time.sleep(0.2)
    Clamd("", "", process).stop()
    log = root / "clamd.log"
    tail = " ".join((log.read_text(errors="replace") if log.exists() else "").splitlines()[-3:])
    raise ClamdError(f"clamd did not answer on 127.0.0.1:{port} within {START_TIMEOUT_S:.0f} s ({tail or 'no log'})")
