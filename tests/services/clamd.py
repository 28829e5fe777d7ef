"""Run a real, throwaway ClamAV daemon for tests and benchmarks.

No signature download: the database directory holds one local ``.ndb`` file
with the EICAR test pattern, so the daemon starts in well under a second and its
verdicts are deterministic. Needs the Debian ``clamav-daemon`` package; the
Debian service itself is never used.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.services._process import PORT_ATTEMPTS, ServiceProcess, base_dir_or_temp, free_port

CLAMD_BIN = shutil.which("clamd") or "/usr/sbin/clamd"

# Built from its hex form so this file is not itself flagged by a scanner.
EICAR = bytes.fromhex(
    "58354f2150254041505b345c505a58353428505e2937434329377d2445494341522d5354414e"
    "444152442d414e544956495255532d544553542d46494c452124482b482a"
)
# clamd reports it as "Eicar-Test-Signature.UNOFFICIAL": signatures outside the
# official (signed) databases get that suffix.
EICAR_SIGNATURE = "Eicar-Test-Signature"
STREAM_MAX_LENGTH = 100 * 1024 * 1024
MAX_RECURSION = 10

CONFIG_TEMPLATE = """\
Foreground yes
# No "User": clamd keeps the invoking user instead of dropping to "clamav",
# who could not enter the 0700 directories mkdtemp creates.
LocalSocket {root}/clamd.sock
LocalSocketMode 660
FixStaleSocket yes
TCPSocket {port}
TCPAddr 127.0.0.1
DatabaseDirectory {root}/db
TemporaryDirectory {root}/tmp
LogFile {root}/clamd.log
LogTime yes
PidFile {root}/clamd.pid
# The EICAR-only DB is intentionally tiny and unofficial.
OfficialDatabaseOnly no
# Signatures never change during a run: no periodic reload.
SelfCheck 0
StreamMaxLength {stream_max}
MaxScanSize {stream_max}
MaxFileSize {stream_max}
MaxRecursion {max_recursion}
MaxFiles 10000
ScanArchive yes
# Without this, content beyond a limit is silently left unscanned and the reply is OK.
AlertExceedsMax yes
MaxThreads 8
ReadTimeout 30
CommandReadTimeout 10
"""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _errors_and_tail(path: Path, lines: int = 15) -> str:
    text = _read(path).splitlines()
    errors = [line for line in text if "ERROR" in line or "rror:" in line]
    return "\n".join(errors + ["..."] + text[-lines:]) if text else "<empty>"


def _ping(family: int, address: str | tuple[str, int], timeout: float = 1.0) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(address)
            s.sendall(b"zPING\0")
            return s.recv(64).rstrip(b"\0\n") == b"PONG"
    except OSError:
        return False


@dataclass
class Clamd(ServiceProcess):
    socket_path: Path
    tcp_host: str
    tcp_port: int
    stop_grace_s = 10.0

    @property
    def tcp_address(self) -> str:
        return f"{self.tcp_host}:{self.tcp_port}"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "clamd.log"


def _prepare(root: Path, port: int) -> Path:
    (root / "db").mkdir(exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    (root / "db" / "eicar.ndb").write_text(f"{EICAR_SIGNATURE}:0:*:{EICAR.hex()}\n")
    conf = root / "clamd.conf"
    conf.write_text(CONFIG_TEMPLATE.format(
        root=root, port=port, stream_max=STREAM_MAX_LENGTH, max_recursion=MAX_RECURSION
    ))
    return conf


def start_clamd(base_dir: Path | None = None, timeout: float = 60.0) -> Clamd:
    """Start clamd in ``base_dir`` (a fresh temp dir, removed on stop, if None)."""
    root, owns = base_dir_or_temp(base_dir, "clamd-")
    # AF_UNIX paths are limited to 108 bytes; pytest tmp paths can exceed it.
    if len(str(root / "clamd.sock")) > 100:
        raise RuntimeError(f"clamd base_dir path too long for a Unix socket: {root}")

    # Retry on a fresh port if clamd cannot bind the probed one.
    for attempt in range(PORT_ATTEMPTS):
        cd = Clamd(root / "clamd.sock", "127.0.0.1", free_port(), base_dir=root, owns_base_dir=owns)
        conf = _prepare(root, cd.tcp_port)
        cd.log_path.unlink(missing_ok=True)  # judge each attempt by its own log
        with open(root / "clamd.stderr", "wb") as err:
            cd.process = subprocess.Popen(
                [CLAMD_BIN, "--foreground", f"--config-file={conf}"],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                start_new_session=True,
            )
        atexit.register(cd.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and cd.process.poll() is None:
            if _ping(socket.AF_UNIX, str(cd.socket_path)):
                if _ping(socket.AF_INET, (cd.tcp_host, cd.tcp_port)):
                    return cd
                # clamd only logs a failed TCP bind and carries on with the Unix socket.
                if "Cannot bind" in _read(cd.log_path):
                    break
            time.sleep(0.05)
        status = cd.process.poll()
        detail = (
            f"exit status: {status}\n--- clamd.log ---\n{_errors_and_tail(cd.log_path)}\n"
            f"--- stderr ---\n{_errors_and_tail(root / 'clamd.stderr')}"
        )
        error = f"clamd did not answer PING on its Unix socket and TCP port:\n{detail}"
        cd.stop_failed_start(detail, error, attempt)
    raise AssertionError("unreachable")
