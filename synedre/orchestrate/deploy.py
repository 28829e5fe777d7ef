"""Deploy to pre-production (SPEC §9.3): `./deploy <target> --preprod` in its own checkout.

What the agent wrote is untrusted code (SPEC §13): the script runs as its own unprivileged
user (`Confinement.user`, never root, never the fleet's), inside Anthropic's sandbox runtime
(`srt`: bubblewrap plus a filtering proxy, the runtime Claude Code's own sandbox is built on),
with writes only in its own directory (the checkout, and its HOME and TMPDIR beside it), none of
the fleet's files readable (`Settings.fleet_files`), the network only to the tenant's
`deploy_hosts` (through the proxy; none when empty) and an environment of the tenant's
`deploy_env` names alone. `preflight` refuses to start a deploy whose sandbox cannot run:
`DeployResult(ok=False)` with the reason, nothing of `./deploy` started.

`run_deploy` never raises for what the deploy itself does: a non-zero exit, a timeout, a
missing or non-executable script all come back as `DeployResult(ok=False)`, a QA failure
the iteration feeds to the agent. It raises `DeployError` only for a target that could
not be passed safely as an argument (the tenant comes from the agent's contract).

The script runs in a process group of its own; on timeout the whole group gets SIGTERM,
then SIGKILL after `KILL_GRACE_S`. Its output (stdout and stderr, interleaved as written)
is read as it comes and only the last `TAIL_LINES` lines are kept, a line longer than
`MAX_LINE_CHARS` being split; the kept text goes through `redact` before it is returned.
A helper the script left running in the background with the output still open does not
hold the call: the output is read for `DRAIN_S` more once the script has exited.

Limits: redaction sees only the kept tail, so a secret inside a line split at
`MAX_LINE_CHARS` (cut at a space when the chunk has one) may be cut in two and escape an
exact-value match.
"""
from __future__ import annotations

import codecs
import json
import os
import pwd
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TAIL_LINES = 200
MAX_LINE_CHARS = 4000
KILL_GRACE_S = 5.0
DRAIN_S = 2.0
# SPEC §9.3's deploy timeout; the caller passes it (from settings), this is the fallback.
DEFAULT_TIMEOUT_S = 900.0
# A tenant code name: no option-looking or path-looking value reaches the script's argv.
TARGET_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SCRIPT = "./deploy"


# How long srt and bubblewrap get to show they start, before a deploy is refused.
PREFLIGHT_TIMEOUT_S = 20.0


class DeployError(ValueError):
    """The deploy could not even be attempted safely (an invalid target)."""


@dataclass(frozen=True)
class DeployResult:
    ok: bool
    exit_code: int | None  # None when the script could not start; negative: killed by that signal
    timed_out: bool
    log_tail: str          # redacted, at most TAIL_LINES lines
    duration_s: float
    head: str | None = None  # the commit deployed, once its script ran


@dataclass(frozen=True)
class Confinement:
    """Who runs `./deploy` and what its sandbox lets through (SPEC §13)."""
    sandbox_bin: str                 # srt (SYNEDRE_DEPLOY_SANDBOX)
    user: str                        # SYNEDRE_DEPLOY_USER
    hosts: tuple[str, ...] = ()      # the tenant's deploy_hosts: srt's allowedDomains
    env: tuple[tuple[str, str], ...] = ()  # the tenant's deploy_env, resolved (values are secrets)
    deny_read: tuple[Path, ...] = ()  # the fleet's files (Settings.fleet_files)


def sandbox_settings(c: Confinement, workdir: Path) -> dict[str, object]:
    """srt's settings: writes in `workdir` alone (the checkout, HOME, TMPDIR), the fleet's files
    unreadable but for `workdir`, the network to the tenant's hosts alone."""
    return {"network": {"allowedDomains": list(c.hosts), "deniedDomains": []},
            "filesystem": {"denyRead": [str(p) for p in c.deny_read], "allowRead": [str(workdir)],
                           "allowWrite": [str(workdir)], "denyWrite": []}}


def preflight(c: Confinement) -> str | None:
    """None when the deploy's sandbox can start as its user; else why not (nothing is run)."""
    if os.geteuid() != 0:
        return (f"the deploy runs as its own user ({c.user}), which only a root worker can switch to;"
                " it never runs as the fleet's user")
    try:
        user = pwd.getpwnam(c.user)
    except KeyError:
        return f"deploy user {c.user!r} does not exist (scripts/system-deps creates it)"
    if user.pw_uid == 0:
        return f"deploy user {c.user!r} is root"
    missing = [b for b in (c.sandbox_bin, "bwrap", "socat", "rg") if shutil.which(b) is None]
    if missing:
        return (f"deploy sandbox unavailable: not on the PATH: {', '.join(missing)}"
                " (npm @anthropic-ai/sandbox-runtime; Debian bubblewrap, socat, ripgrep)")
    return None


def _env(c: Confinement, workdir: Path) -> dict[str, str]:
    """Never the fleet's own environment (its database URL and keys): the tenant's names only."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": str(workdir / "home"),
            **dict(c.env)}


def _argv(c: Confinement, workdir: Path, settings: Path, target: str) -> list[str]:
    # srt sets TMPDIR to a directory of its own; `env` puts the deploy's own back inside.
    return [c.sandbox_bin, "--settings", str(settings), "--", "env", f"TMPDIR={workdir / 'tmp'}",
            SCRIPT, target, "--preprod"]


class _Tail:
    """The last lines of a byte stream, decoded as UTF-8 (invalid bytes replaced)."""

    def __init__(self, max_lines: int, max_line_chars: int):
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.max_line_chars = max_line_chars
        self._partial = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._partial + self._decoder.decode(data, final)
        *complete, self._partial = text.split("\n")
        for line in complete:
            self._add(line)
        while len(self._partial) > self.max_line_chars:
            self._partial = self._split(self._partial)
        if final and self._partial:
            self._add(self._partial)
            self._partial = ""

    def _split(self, text: str) -> str:
        cut = text.rfind(" ", self.max_line_chars // 2, self.max_line_chars) + 1 or self.max_line_chars
        self.lines.append(text[:cut])
        return text[cut:]

    def _add(self, line: str) -> None:
        while len(line) > self.max_line_chars:
            line = self._split(line)
        self.lines.append(line)

    def text(self) -> str:
        return "\n".join(self.lines)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the whole group is already gone


def run_deploy(checkout: Path, target: str, timeout_s: float, redact: Callable[[str], str],
               confine: Confinement) -> DeployResult:
    """Run `./deploy <target> --preprod` in `checkout` (a copy of its own, which the deploy
    user owns, inside a directory of its own) for at most `timeout_s` seconds, confined."""
    if not TARGET_RE.fullmatch(target):
        raise DeployError(f"invalid deploy target {target[:80]!r}")
    started = time.monotonic()

    def refused(why: str) -> DeployResult:
        return DeployResult(ok=False, exit_code=None, timed_out=False, log_tail=redact(why),
                            duration_s=time.monotonic() - started)
    if why := preflight(confine):
        return refused(why)
    if not os.access(checkout / SCRIPT, os.X_OK):
        return refused(f"{SCRIPT} could not start: no executable {SCRIPT} in the repository")
    workdir = checkout.parent
    user = pwd.getpwnam(confine.user)
    for sub in ("home", "tmp"):
        (workdir / sub).mkdir(mode=0o700, exist_ok=True)
        os.chown(workdir / sub, user.pw_uid, user.pw_gid)
    settings = workdir / "sandbox.json"
    settings.write_text(json.dumps(sandbox_settings(confine, workdir)))
    settings.chmod(0o644)  # the user reads it, cannot change it (its directory is root's)
    tail = _Tail(TAIL_LINES, MAX_LINE_CHARS)
    try:
        proc = subprocess.Popen(_argv(confine, workdir, settings, target), cwd=checkout, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                env=_env(confine, workdir), user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                                umask=0o077)
    except OSError as e:  # the sandbox runtime itself could not start
        return refused(f"deploy sandbox could not start ({shlex.quote(confine.sandbox_bin)}): {e.strerror or e}")
    assert proc.stdout is not None
    timed_out = _pump(proc, tail, deadline=started + timeout_s)
    tail.feed(b"", final=True)
    log = tail.text()
    if timed_out:
        log += f"\n[deploy killed after {timeout_s:g} s]"
    return DeployResult(ok=proc.returncode == 0 and not timed_out, exit_code=proc.returncode,
                        timed_out=timed_out, log_tail=redact(log), duration_s=time.monotonic() - started)


def _pump(proc: subprocess.Popen[bytes], tail: _Tail, deadline: float) -> bool:
    """Read the output until EOF (or `DRAIN_S` after exit); True if the deadline killed it."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    timed_out = False
    drain_until: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        try:
            while True:
                now = time.monotonic()
                if proc.poll() is not None and drain_until is None:
                    drain_until = now + DRAIN_S
                if not timed_out and drain_until is None and now >= deadline:
                    timed_out = True
                    _stop(proc)
                    drain_until = time.monotonic() + DRAIN_S
                if drain_until is not None and now >= drain_until:
                    break  # exited, but something in the background keeps the output open
                limit = drain_until if drain_until is not None else deadline
                if sel.select(timeout=min(0.2, max(0.0, limit - now))):
                    try:
                        data = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not data:
                        break  # EOF: every writer has closed the output
                    tail.feed(data)
        finally:
            proc.stdout.close()
    if timed_out:
        _kill_group(proc.pid, signal.SIGKILL)  # anything that ignored SIGTERM, or outlived its parent
    proc.wait()
    return timed_out


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the script's whole group, then SIGKILL if it is still there after the grace."""
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _kill_group(proc.pid, signal.SIGKILL)
