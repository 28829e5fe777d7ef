"""The process side of a launch (SPEC §8 Process, Stream, Timeouts; §12b process group).

`build_argv` writes the CLI's arguments in the SPEC's order; `run` drives the CLI under a
pty until it ends, a timer fires or the caller asks it to stop, and on every path kills
the CLI's process group and every process that inherited the run's token (`_kill_all`).
Persistence is the caller's callback: `run` redacts, parses and writes the NDJSON log
itself (`reassembly.Reassembler`), and hands typed events to `on_events` from a thread of
their own (`event_writer.EventWriter`). What the child does before exec is `preexec`'s.
"""
from __future__ import annotations

import functools
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pexpect

from synedre.log import log
from synedre.redact import Redactor
from synedre.spawn import preexec
from synedre.spawn.event_writer import EventWriter
from synedre.spawn.reassembly import Batch, Reassembler
from synedre.spawn.stream import ResultMessage

IDLE_EXIT, HARD_EXIT = 125, 124
# Linux refuses (E2BIG) one argument longer than MAX_ARG_STRLEN = 32 pages, 128 KiB with
# 4 KiB pages, its NUL included; larger pages only raise it. The margin is a safety net.
MAX_ARG_BYTES = 128 * 1024 - 1024
READ_SIZE = 65536
# How long one read waits for data: the upper bound on how late a timer or `stop` is seen.
POLL_S = 0.2
TERM_GRACE_S = 3.0  # SIGTERM, then SIGKILL whatever of the run is left after this
KILL_WAIT_S = 2.0
EXIT_WAIT_S = 2.0  # after EOF, for the leader to finish exiting on its own
# Set in the child's environment; every process of the run inherits it (see `_kill_all`).
RUN_TOKEN_VAR = "SYNEDRE_RUN_TOKEN"


@dataclass(frozen=True)
class Limits:
    idle_timeout_s: float = 1200.0  # no byte at all on the pty for this long -> "idle"
    # Node's boot is not the model's silence: before the CLI's first byte, "idle" waits at
    # least this long from the start (a CLI that never prints is still stopped, by this or "hard").
    start_timeout_s: float = 30.0
    hard_timeout_s: float = 6600.0  # from the start -> "hard"
    budget_s: float = 2400.0        # the Python launch budget, also from the start -> "budget"
    result_grace_s: float = 5.0     # after the `result` event, before the group is killed


@dataclass
class RunOutcome:
    # The process's own code when it ended by itself (-N: killed by a signal N not ours),
    # IDLE_EXIT / HARD_EXIT on timeouts, None when we killed it otherwise.
    exit_code: int | None
    stop_reason: str  # "result" | "exited" | "idle" | "hard" | "budget" | "error" | "interrupted"
    session_id: str | None
    result: ResultMessage | None
    events: int
    skipped_lines: int  # pty lines that were not JSON objects, plus oversized ones
    duration_s: float
    error: BaseException | None = None  # set with stop_reason "error"
    pgid: int | None = None  # the (now killed) process group, for logs and audits


def _fit_arg(text: str, what: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= MAX_ARG_BYTES:
        return text
    note = (f"\n\n[NOTE: this {what} was truncated from {len(data)} to about {MAX_ARG_BYTES} bytes "
            "to fit the operating system's per-argument limit; the end of the original is missing.]")
    keep = MAX_ARG_BYTES - len(note.encode("utf-8"))
    # errors="ignore" drops a multi-byte character cut in half at the boundary.
    return data[:keep].decode("utf-8", errors="ignore") + note


def build_argv(claude_bin: str, *, add_dir: str | Path | Sequence[str | Path], prompt: str, system_prompt: str,
               model: str, settings: str | Path | None = None,
               resume_session: str | None = None, persist_session: bool = False, max_turns: int | None = None,
               allowed_tools: str | Sequence[str] | None = None,
               disallowed_tools: str | Sequence[str] | None = None, strict_mcp: bool = True,
               max_budget_usd: float | None = None) -> list[str]:
    """The CLI's argv in SPEC §8's order: `--add-dir` is variadic, so it comes right after
    `-p` (one or more directories: the workspace, the contract's), ended by the next option,
    `--settings` (the launch's own file: its sandbox, see synedre/spawn/sandbox.py); the
    prompt is last. A prompt over MAX_ARG_BYTES is truncated and says so; a
    system prompt that long is our own bug (cutting it would drop guard rails): ValueError.

    `allowed_tools` goes out twice: as `--tools` (the tool names alone), because under
    bypassPermissions `--allowed-tools` approves but does not restrict and `--tools` is what
    takes every other built-in tool away; and as `--allowed-tools`, as SPEC §8 asks. The
    three tool options are variadic too: each is one comma-joined argument, ended by the
    next option.

    The session is persisted (`persist_session`, in the CLI's config directory: see
    synedre/spawn/session.py) or not (`--no-session-persistence`); `resume_session` continues
    a persisted one (`--resume <id>`)."""
    if len(system_prompt.encode("utf-8")) > MAX_ARG_BYTES:
        raise ValueError(f"system prompt exceeds {MAX_ARG_BYTES} bytes")
    dirs = [add_dir] if isinstance(add_dir, (str, Path)) else list(add_dir)
    argv = [claude_bin, "-p", "--add-dir", *map(str, dirs)]
    if settings is not None:
        argv += ["--settings", str(settings)]
    if resume_session:
        argv += ["--resume", resume_session]
    elif not persist_session:
        argv += ["--no-session-persistence"]
    argv += ["--exclude-dynamic-system-prompt-sections"]
    if strict_mcp:
        argv += ["--strict-mcp-config"]
    argv += ["--output-format", "stream-json", "--verbose", "--include-partial-messages",
             "--include-hook-events", "--model", model]
    if max_turns is not None:
        argv += ["--max-turns", str(max_turns)]
    if allowed_tools is not None:
        allowed = _tool_list(allowed_tools)
        names = list(dict.fromkeys(rule.split("(", 1)[0] for rule in allowed))
        argv += ["--tools", ",".join(names)]  # "" = no built-in tool at all
        if allowed:
            argv += ["--allowed-tools", ",".join(allowed)]
    if disallowed_tools is not None and _tool_list(disallowed_tools):
        argv += ["--disallowed-tools", ",".join(_tool_list(disallowed_tools))]
    if max_budget_usd is not None:
        argv += ["--max-budget-usd", str(float(max_budget_usd))]
    argv += ["--append-system-prompt", system_prompt, "--permission-mode", "bypassPermissions",
             _fit_arg(prompt, "prompt")]
    return argv


def _tool_list(tools: str | Sequence[str]) -> list[str]:
    items = tools.split(",") if isinstance(tools, str) else list(tools)
    for rule in items:  # a comma inside a rule would split it in two on the CLI's side
        if "," in rule:
            raise ValueError(f"tool rule {rule!r} contains a comma")
    return [rule.strip() for rule in items if rule.strip()]


def _marked(token: str) -> list[int]:
    """Live processes whose environment carries this run's token (Linux /proc). A zombie's
    environ reads empty, so the dead are not listed; other users' processes are unreadable."""
    needle = f"{RUN_TOKEN_VAR}={token}".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in Path(entry.path, "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _signal_all(pgid: int, pids: list[int], sig: int) -> None:
    targets = [("group", pgid)]
    for pid in pids:
        try:  # a Bash tool shell leads its own group: take the group, env-clearing children too
            targets.append(("group", pid) if os.getpgid(pid) == pid else ("pid", pid))
        except ProcessLookupError:
            continue
    for kind, ident in targets:
        if kind == "group" and ident == os.getpgrp():
            continue  # never our own group
        try:
            os.killpg(ident, sig) if kind == "group" else os.kill(ident, sig)
        except (ProcessLookupError, PermissionError):
            continue


@dataclass(frozen=True)
class RunAs:
    """The unprivileged OS user the agent runs as (SYNEDRE_AGENT_USER, worker as root)."""
    name: str
    uid: int
    gid: int

    @classmethod
    def lookup(cls, name: str) -> RunAs:
        import pwd

        entry = pwd.getpwnam(name)  # KeyError: not created (scripts/system-deps creates it)
        if entry.pw_uid == 0:
            raise ValueError(f"agent user {name!r} is root")
        return cls(name, entry.pw_uid, entry.pw_gid)


@dataclass(frozen=True)
class Apart:
    """A launch's own view of the temporary places every process shares, so that no file one
    launch writes there is another's to read (issue 25). Every launch runs as the same agent
    user, so file modes cannot keep two launches apart, and the pinned CLI puts what the
    agent's commands write to `$TMPDIR` in `/tmp/claude-<uid>` (its fallback whenever the
    temporary directory it is given makes too long a path) and its proxy's socket in `/tmp`:
    the same places for every launch, writable inside each one's sandbox.

    The child, once it is the agent's user, enters a user and a mount namespace of its own
    (unshare(CLONE_NEWUSER | CLONE_NEWNS), its own uid and gid mapped to themselves, as
    bubblewrap does: no privilege is needed, none is gained outside), makes every mount
    private (nothing propagates back to the host), binds `tmp` (the launch's temporary
    directory in its private home, the agent's, 0700) on `/tmp` and mounts a fresh tmpfs on
    `/dev/shm`, then execs the CLI, which keeps no capability past exec (its uid is not 0
    there): the CLI, its bubblewrap sandbox and every command see that view. `keep`: the
    launch's own directories that were under `/tmp` (a state directory there), bound again at
    the same place over the new `/tmp`; nothing else of the host's `/tmp` is in view."""
    tmp: Path
    keep: tuple[Path, ...] = ()


def as_agent(run_as: RunAs | None, apart: Apart | None, cwd: str | Path | None,
             umask: int | None = None) -> Callable[[], None]:
    """What a child runs before it execs the agent's program (`preexec_fn`): the umask, the
    agent's user (`run_as`), the launch's own namespace (`apart`), the death of the child
    with its parent. The CLI's, and the sandbox preflight's, so both start alike."""
    return functools.partial(_before_exec, umask, run_as, apart, None if cwd is None else str(cwd))


def _before_exec(umask: int | None, run_as: RunAs | None = None, apart: Apart | None = None,
                 cwd: str | None = None) -> None:
    parent = os.getppid()
    if umask is not None:
        os.umask(umask)
    if run_as is not None:
        # Groups first (needs root), then the gid, then the uid: after setuid nothing can
        # be taken back. No supplementary group: root's would reach root-group files.
        os.setgroups([])
        os.setgid(run_as.gid)
        os.setuid(run_as.uid)
    if apart is not None:
        preexec.enter_apart(apart.tmp, apart.keep)
        if cwd is not None:
            os.chdir(cwd)  # by its name again: the working directory may be a path bound anew
    # After the credentials change: the kernel clears the parent-death signal when they do.
    preexec.die_with_parent(parent)


def _kill_all(child: pexpect.spawn, token: str) -> None:
    """SIGTERM the CLI's group and every process carrying the run token, SIGKILL what is left.

    Why not only the group: the CLI (2.1.332) starts each Bash tool shell in a session of
    its own (setsid), so killpg on the CLI's group misses them, and what they put in the
    background outlives the CLI. They inherit the environment, hence the token; one that
    replaces its environment and leaves its group escapes (documented limit).
    The leader is reaped while waiting: an unreaped (zombie) leader would keep its group
    "alive" to kill(0), and until then its pid, hence the pgid, cannot be reused."""
    pgid = child.pid
    assert pgid is not None  # spawned
    for sig, wait in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, KILL_WAIT_S)):
        _signal_all(pgid, _marked(token), sig)
        deadline = time.monotonic() + wait
        while True:
            child.isalive()  # waitpid(WNOHANG) on the leader
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                if not _marked(token):
                    return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    log.error("spawn_processes_survived_sigkill", pgid=pgid, pids=_marked(token))


def _drain(child: pexpect.spawn, stream: Reassembler) -> None:
    """What the group wrote before it died, then the final line written without a newline."""
    for _ in range(1024):  # bounded: at most 64 MiB
        try:
            stream.handle(stream.reader.feed(child.read_nonblocking(READ_SIZE, timeout=0)))
        except (pexpect.TIMEOUT, pexpect.EOF, OSError):
            break
    stream.handle(stream.reader.close())


def run(argv: list[str], *, cwd: str | Path, env: dict[str, str], limits: Limits, redactor: Redactor,
        on_events: Callable[[Batch], None], ndjson_path: Path | None,
        on_session: Callable[[str], None] | None = None,
        stop: threading.Event | None = None, umask: int | None = None,
        run_as: RunAs | None = None, apart: Apart | None = None) -> RunOutcome:
    """Run the CLI to its end and kill everything it started, on every path.

    Stop reasons: "result" (the result event came; the process got `result_grace_s` to
    exit, a `stop` during the grace only shortens it), "exited" (EOF without a result),
    "idle", "hard", "budget" (Limits), "interrupted" (`stop` set by the caller: worker
    shutdown), "error" (spawn failure, persistence callback failure, a bug: `error` holds
    the exception). KeyboardInterrupt / SystemExit kill everything too, then propagate.
    The NDJSON file is appended to, never truncated. `umask`, when given, is set in the
    child before exec, whatever the calling process's umask is at that moment. `run_as`
    (the worker being root) drops the child to that user before exec; the kill on every
    path still reaches its processes, root reading their /proc environ for the token.
    `apart` gives the child its own /tmp and /dev/shm (`Apart`); a child that cannot have them
    is never started without them (stop reason "error")."""
    started = time.monotonic()
    writer = EventWriter(on_events)
    ndjson = ndjson_path.open("ab") if ndjson_path else None
    stream = Reassembler(redactor, ndjson, writer.add, on_session)
    child: pexpect.spawn | None = None
    token = uuid.uuid4().hex
    reason, exited_alone = "error", False
    error: BaseException | None = None
    try:
        child = pexpect.spawn(argv[0], argv[1:], cwd=str(cwd), env={**env, RUN_TOKEN_VAR: token},
                              dimensions=(50, 200), echo=False, encoding=None,
                              preexec_fn=as_agent(run_as, apart, cwd, umask))
        reason = _read(child, stream, writer, limits, started, stop)
    except Exception as exc:  # noqa: BLE001 - returned as stop_reason "error" for the caller to audit
        reason, error = "error", exc
    finally:
        try:
            if child is not None:
                exited_alone = not child.isalive()  # checked before we signal anything
                _kill_all(child, token)
                _drain(child, stream)
                child.close(force=True)
        finally:
            writer.close()
            if ndjson:
                ndjson.close()
    if error is None and writer.error is not None:  # possibly the last batch, after the exit
        reason, error = "error", writer.error
    exit_code = _exit_code(reason, child if exited_alone else None)
    outcome = RunOutcome(exit_code, reason, stream.session_id, stream.result, stream.events,
                         stream.reader.skipped + stream.reader.oversized, time.monotonic() - started,
                         error, child.pid if child else None)
    log.info("spawn_run_end", pgid=outcome.pgid, stop_reason=reason, exit_code=exit_code,
             session_id=outcome.session_id, events=outcome.events, skipped_lines=outcome.skipped_lines,
             duration_s=round(outcome.duration_s, 2), error=type(error).__name__ if error else None)
    return outcome


def _exit_code(reason: str, exited: pexpect.spawn | None) -> int | None:
    """The run's exit code: ours for a limit, the child's when it exited alone, else None (we
    killed it: it has no code of its own)."""
    if reason == "idle":
        return IDLE_EXIT
    if reason in ("hard", "budget"):
        return HARD_EXIT
    if exited is not None:
        return exited.exitstatus if exited.exitstatus is not None else -(exited.signalstatus or 0)
    return None


def _read(child: pexpect.spawn, stream: Reassembler, writer: EventWriter, limits: Limits, started: float,
          stop: threading.Event | None) -> str:
    """The read loop; returns the stop reason. Every timer is checked between reads of at
    most POLL_S, so a busy stream cannot starve them."""
    # ptyprocess forks, calls setsid() and execs before spawn returns: the child leads its
    # own session and group. Never let killpg reach our own group by mistake.
    assert child.pid is not None
    pgid = os.getpgid(child.pid)
    if pgid != child.pid:
        raise RuntimeError(f"child {child.pid} does not lead its own process group ({pgid})")
    deadline, deadline_reason = min((limits.hard_timeout_s, "hard"), (limits.budget_s, "budget"))
    last_byte = started + max(0.0, limits.start_timeout_s - limits.idle_timeout_s)  # before the first byte
    result_at = None
    while True:
        now = time.monotonic()
        if writer.error is not None:
            return "error"
        if result_at is not None:
            if now - result_at >= limits.result_grace_s or (stop and stop.is_set()):
                return "result"
        elif stop and stop.is_set():
            return "interrupted"
        elif now - started >= deadline:
            return deadline_reason
        elif now - last_byte >= limits.idle_timeout_s:
            return "idle"
        try:
            data = child.read_nonblocking(READ_SIZE, timeout=POLL_S)
        except pexpect.TIMEOUT:
            continue
        except pexpect.EOF:  # the pty closed, or pexpect saw the leader die
            # The pty closes while the leader exits: give it a moment to become reapable,
            # so its own exit code is read rather than replaced by our SIGTERM.
            end = time.monotonic() + EXIT_WAIT_S
            while child.isalive() and time.monotonic() < end:
                time.sleep(0.02)
            return "result" if stream.result else "exited"
        last_byte = time.monotonic()
        stream.handle(stream.reader.feed(data))
        if stream.result and result_at is None:
            result_at = last_byte
