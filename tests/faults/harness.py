"""The recovery suite's machinery, shared by tests/faults/test_recovery.py, bench/recovery.py
and (launches on, at the end of this file) tests/faults/test_launch_faults.py.

A redis-server of our own on a free loopback port (so it can be SIGKILLed without touching
anyone's broker), a scripted Mistral API that answers every classification prompt and
counts the calls per message, unique messages, the real fleet (`python -m synedre.cli
fleet`, owning an embedded PostgreSQL under its state directory), and the counts read back
from that PostgreSQL: raw rows, state rows, audit rows per event, materializations.

Delivery is IMAP APPEND on one connection to a throwaway Dovecot: about 2 ms a message
here (200 in under half a second; MULTIAPPEND is faster still but not needed), so mail is
appended for real rather than inserted behind the poller's back.

Each scenario drains `N_MESSAGES` (200, to stay bounded on two shared cores) unique
messages through the fleet, injects its fault mid-drain, and measures the time from the
fault's end to the last message reaching a terminal status (SPEC §12b: under 60 s).
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from synedre.config import Settings
from synedre.pipeline import TERMINAL, WORKER_GROUPS, LaunchStatus, Status
from synedre.spawn.locks import SLOTS_KEY, LaunchSemaphore
from synedre.stages.recap import DRAFT_SYSTEM
from tests.services import stack
from tests.services.claude_api import ClaudeAPI, ScriptedModel, Sleep, bash, start_claude_api, text
from tests.services.llm_server import HTTPError, LLMServer, start_llm_server
from tests.services.smtp import SmtpSink, start_smtp

ROOT = stack.ROOT
N_MESSAGES = 200
RECOVERY_TARGET_S = 60.0
LLM_DELAY_S = 0.3
REDIS_OUTAGE_S = 10.0
# Spawn is disabled (SYNEDRE_SPAWN_DISABLED=1): a materialized message waits there for good.
DONE = frozenset({*TERMINAL, Status.MATERIALIZED})
# Written once per message by a stage that did its work; two of one = duplicated work.
ONCE_EVENTS = ("poll_inserted", "classified", "materialized", "materialize_skipped_noise")
# The LLM's answers cycle over these, so every kind of materialization is exercised.
INTENTS = ("question", "run", "noise", "conseil")
# How long past the target a scenario keeps waiting, so a miss is measured, not guessed.
OVERTIME_S = 40.0
# The fleet's sweep period, its claims' lease, its poll lock's lifetime and, with launches on,
# its launch locks' lifetime, shortened from their defaults so that a scenario takes a
# fraction of the time; every bound below derives from them.
SWEEP_EVERY_S = 5.0
LOCK_TTL_S = 15.0
CLAIM_LEASE_S = 12.0  # a killed worker's claim is offered again this soon (the default: 40 s)
POLL_LOCK_TTL_S = 15.0  # a poller killed mid-poll holds the mailbox this long (the default: 60 s)
# The recap's draft reply goes through the same LLM after a launch: its fixed opening.
DRAFT_MARK = DRAFT_SYSTEM.split("{", 1)[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    return stack.wait_for(predicate, timeout, what, interval=interval)


# -- messages and the scripted LLM --------------------------------------------------------

def token(tag: str, n: int) -> str:
    return f"FAULT-{tag}-{n}"


def message(tag: str, n: int) -> bytes:
    """A plain, valid, unsigned message whose token appears in its subject and body (so in
    the classification prompt too)."""
    t = token(tag, n)
    return (f"From: Client {n} <client{n}@example.org>\r\nTo: atlas@synedre.test\r\n"
            f"Subject: Demande {t}\r\nMessage-ID: <{t.lower()}@example.org>\r\n"
            "Date: Tue, 01 Dec 2026 09:00:00 +0000\r\nMIME-Version: 1.0\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n\r\n"
            f"Bonjour,\r\n\r\nPouvez-vous regarder la demande {t} ? Merci.\r\n").encode()


class FaultLLM:
    """Answers any classification prompt with valid JSON (the intent from the message's
    number, cycling over `intents`) and records when each message's prompts arrived. The
    recap's draft reply (asked after a launch) gets a plain text and is counted apart."""

    def __init__(self, tag: str, intents: tuple[str, ...] = INTENTS):
        self.pattern = re.compile(rf"FAULT-{re.escape(tag)}-(\d+)")
        self.intents = intents
        self.calls: dict[int, list[float]] = defaultdict(list)  # message number -> time.time()
        self.drafts: dict[int, list[float]] = defaultdict(list)
        self.unexpected: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, body: Any, path: str) -> Any:
        if not path.endswith("/chat/completions"):
            return None
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        found = self.pattern.search(text)
        if not found:
            self.unexpected.append(text[:200])
            raise HTTPError(400, "no FAULT token in the prompt")
        n = int(found.group(1))
        if DRAFT_MARK in text:
            with self._lock:
                self.drafts[n].append(time.time())
            return "Bonjour, la demande est traitée. Bien à vous, Julien"
        with self._lock:
            self.calls[n].append(time.time())
        return json.dumps({"intent": self.intents[n % len(self.intents)], "complexity": "leger",
                           "confidence": 0.9, "rationale": "scripted by the fault suite"})

    def snapshot(self) -> dict[int, list[float]]:
        with self._lock:
            return {n: list(v) for n, v in self.calls.items()}


# -- our own Redis ---------------------------------------------------------------------------

class RedisServer:
    """redis-server on a loopback port of its own, no persistence: a restart is empty."""

    def __init__(self, directory: Path, port: int | None = None):
        self.directory = directory
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> float:
        """Start it (empty) and return time.time() once it answers PING."""
        self.starts += 1
        data = self.directory / f"data-{self.starts}"
        data.mkdir(parents=True, exist_ok=True)
        log = open(self.directory / f"redis-{self.starts}.log", "wb")
        try:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no",
                 "--bind", "127.0.0.1", "--dir", str(data), "--maxmemory-policy", "noeviction"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        wait_for(self.ping, timeout, f"redis-server on port {self.port}", interval=0.02)
        return time.time()

    def ping(self) -> bool:
        import redis

        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"redis-server on port {self.port} is not running")
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    def kill(self) -> float:
        """SIGKILL: no save, no goodbye. Returns time.time() of the kill."""
        assert self.proc is not None
        self.proc.kill()
        at = time.time()
        self.proc.wait(10)
        return at

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# -- the embedded PostgreSQL, seen from outside ----------------------------------------------

def postmaster(pgdata: Path):
    """The running postmaster's info from <pgdata>/postmaster.pid, or None. Never starts one."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.utils import PostmasterInfo
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (AssertionError, ValueError, OSError):  # the file is being rewritten
        return None
    return info if info is not None and info.is_running() and info.status == "ready" else None


class Observer:
    """Reads the fleet's database from the test process: reconnects across a restart."""

    def __init__(self, pgdata: Path, tag: str):
        self.pgdata = pgdata
        self.pattern = re.compile(rf"FAULT-{re.escape(tag)}-(\d+)")
        self._conn: psycopg.Connection | None = None
        self.last_error: str | None = None

    def _connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            info = postmaster(self.pgdata)
            if info is None:
                raise psycopg.OperationalError("the embedded PostgreSQL is not running")
            # the socket's port too: the server need not listen on the default one
            where = f"host={info.socket_dir}" + (f" port={info.port}" if info.port else "")
            self._conn = psycopg.connect(f"{where} user=postgres dbname=postgres", autocommit=True,
                                         connect_timeout=3)
        return self._conn

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self._connect().execute(sql, params).fetchall()
        except psycopg.Error:
            self.close()
            raise

    def try_query(self, sql: str, params: tuple = ()) -> list[tuple] | None:
        try:
            return self.query(sql, params)
        except psycopg.Error as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            return None

    def close(self) -> None:
        if self._conn is not None:
            with suppress(Exception):
                self._conn.close()
        self._conn = None

    def statuses(self) -> dict[int, str] | None:
        """Message number -> status, for every message with a state row (None: database down)."""
        rows = self.try_query("SELECT r.subject, s.status FROM synedre.raw_messages r"
                              " LEFT JOIN synedre.email_states s ON s.message_id = r.id")
        if rows is None:
            return None
        out = {}
        for subject, status in rows:
            found = self.pattern.search(subject or "")
            if found:
                out[int(found.group(1))] = status
        return out

    def done(self, delivered: set[int]) -> bool:
        st = self.statuses()
        return st is not None and delivered <= st.keys() and all(st[n] in DONE for n in delivered)

    def count_done(self) -> int:
        st = self.statuses() or {}
        return sum(1 for s in st.values() if s in DONE)


# -- the fleet -------------------------------------------------------------------------------

class Fleet:
    """`python -m synedre.cli fleet` in its own session, its (and its children's) output in
    one log file. Its children start their own sessions: stop() reaps them by pid."""

    def __init__(self, env: dict[str, str], log_dir: Path, grace_s: float = 15.0):
        self.env, self.grace_s = env, grace_s
        self.log = log_dir / f"fleet-{uuid.uuid4().hex[:6]}.log"
        self.proc: subprocess.Popen | None = None
        self.seen: dict[int, psutil.Process] = {}

    def start(self) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "synedre.cli", "fleet", "--grace", str(self.grace_s)],
                                         env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def descendants(self) -> list[psutil.Process]:
        if not self.alive():
            return []
        assert self.proc is not None
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for k in kids:
            self.seen.setdefault(k.pid, k)
        return kids

    def workers(self, groups: tuple[str, ...] | None = None) -> list[psutil.Process]:
        """The fleet's Celery worker processes (main processes and pool children), optionally
        only those of some worker groups (`-n <group>-<i>@%h`)."""
        out = []
        for p in self.descendants():
            try:
                argv = p.cmdline()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            if "worker" not in argv or "-Q" not in argv:  # `python -m tasks worker -Q ...`, its pool children alike
                continue
            node = argv[argv.index("-n") + 1] if "-n" in argv else ""
            if groups is None or node.split("@")[0].rsplit("-", 1)[0] in groups:
                out.append(p)
        return out

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until every worker the fleet started said ` ready.` and the IDLE watcher watches."""
        def ready() -> bool:
            if not self.alive():
                raise RuntimeError(f"the fleet exited ({self.proc and self.proc.returncode}):\n{self.tail()}")
            text = self.output()
            self.descendants()
            workers = set(re.findall(r"fleet_child_started\s+child=(\S+)", text)) - {"beat", "idle"}
            return bool(workers) and text.count(" ready.") >= len(workers) and "idle_watching" in text
        wait_for(ready, timeout, "the fleet's workers and IDLE watcher", interval=0.25)

    def stop(self) -> None:
        """SIGTERM the fleet (it stops its children and the embedded database), then
        SIGKILL whatever of its process tree is left."""
        self.descendants()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.grace_s + 20)
            except subprocess.TimeoutExpired:
                pass
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        leftovers = [p for p in self.seen.values() if _running(p)]
        for p in leftovers:
            with suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(leftovers, timeout=10)


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- one test's stack ------------------------------------------------------------------------

@dataclass
class Stack:
    workdir: Path
    tag: str
    env: dict[str, str]
    redis: RedisServer
    llm: LLMServer
    script: FaultLLM
    dovecot: Any
    observer: Observer
    fleet: Fleet | None = None
    delivered: set[int] = field(default_factory=set)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    # launches on (open_stack(launches=True)): the agent's scripted Messages API, the
    # founder's SMTP server, spawn workers started beside the fleet's own
    api: ClaudeAPI | None = None
    smtp: SmtpSink | None = None
    spawn_workers: list[stack.Proc] = field(default_factory=list)

    @property
    def pgdata(self) -> Path:
        return Path(self.env["SYNEDRE_STATE_DIR"]) / "pgdata"

    def mark(self, what: str) -> float:
        at = time.time()
        self.timeline.append((at, what))
        return at

    def deliver(self, numbers: range | list[int], pace_s: float = 0.0) -> None:
        """IMAP APPEND each message to INBOX (one connection; `pace_s` apart)."""
        with self.dovecot.client() as imap:
            for n in numbers:
                imap.append("INBOX", message(self.tag, n))
                self.delivered.add(n)
                if pace_s:
                    time.sleep(pace_s)

    def start_fleet(self) -> Fleet:
        self.fleet = Fleet(self.env, self.workdir / "logs")
        self.fleet.start()
        self.mark("fleet started")
        self.fleet.wait_ready()
        self.mark("fleet ready")
        return self.fleet

    def wait_mid_drain(self, done: int, classifying: int = 3, timeout: float = 120.0) -> dict[str, int]:
        """Until `done` messages are terminal while at least `classifying` wait on the LLM
        (so the fault cuts paid calls off); returns the statuses at that moment."""
        counts: dict[str, int] = {}

        def reached() -> bool:
            nonlocal counts
            if self.fleet is not None and not self.fleet.alive():
                raise RuntimeError(f"the fleet exited:\n{self.fleet.tail()}")
            st = self.observer.statuses() or {}
            counts = dict(Counter(st.values()))
            if self.delivered <= st.keys() and all(st[n] in DONE for n in self.delivered):
                raise RuntimeError(f"the drain finished before the fault could land mid-drain: {counts}")
            return sum(1 for s in st.values() if s in DONE) >= done and counts.get(Status.CLASSIFYING, 0) >= classifying
        try:
            wait_for(reached, timeout, f"{done} messages terminal and {classifying} being classified", interval=0.05)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; statuses {counts}; database: {self.observer.last_error}") from None
        return counts

    def wait_all_done(self, fault_end: float) -> bool:
        """Until every delivered message is terminal, or OVERTIME_S past the target."""
        deadline = fault_end + RECOVERY_TARGET_S + OVERTIME_S
        while time.time() < deadline:
            if self.observer.done(self.delivered):
                return True
            time.sleep(0.25)
        return self.observer.done(self.delivered)


def fleet_env(workdir: Path, tag: str, redis_url: str, dovecot: Any, clamd: str, llm_url: str) -> dict[str, str]:
    """The fleet's whole environment: none of the caller's SYNEDRE_* (so no
    SYNEDRE_DATABASE_URL: the fleet owns an embedded PostgreSQL under our state dir)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNEDRE_")}
    env.update(stack.mailbox_env(dovecot, workdir))
    env.update({
        "SYNEDRE_BROKER_URL": redis_url, "SYNEDRE_STATE_DIR": str(workdir / "state"),
        "SYNEDRE_SPAWN_DISABLED": "1", "SYNEDRE_CLAMD": clamd,
        "SYNEDRE_MISTRAL_API_KEY": "test-key-not-secret", "SYNEDRE_MISTRAL_SERVER_URL": llm_url,
        "SYNEDRE_DKIM_KEYS_FILE": str(stack.CORPUS / "dkim-keys.json"), "SYNEDRE_LOG_LEVEL": "INFO",
        "SYNEDRE_LOG_FORMAT": "console", "FAULTS_RUN": tag, "SYNEDRE_SWEEP_EVERY_S": str(SWEEP_EVERY_S),
        "SYNEDRE_CLAIM_LEASE_S": str(CLAIM_LEASE_S), "SYNEDRE_POLL_LOCK_TTL_S": str(POLL_LOCK_TTL_S),
        # no approval rule: the faults are about launches, not about the founder's OK
        "SYNEDRE_APPROVAL_POLICY_FILE": str(stack.ROOT / "tests" / "approval-policy.off.toml"),
    })
    return env


def launch_env(env: dict[str, str], workdir: Path, dovecot: Any, api_url: str, smtp: SmtpSink) -> dict[str, str]:
    """`env` with launches on: the real `claude` CLI against the scripted Messages API, and
    the founder's mail (recaps, alerts) through our SMTP server."""
    box = workdir / "mailboxes-smtp.toml"
    box.write_text(
        f'[mailboxes.atlas]\nimap_host = "{dovecot.host}"\nimap_port = {dovecot.port}\nimap_tls = false\n'
        f'smtp_host = "{smtp.host}"\nsmtp_port = {smtp.port}\nsmtp_tls = false\n'
        f'username = "{dovecot.username}"\npassword_env = "TEST_ATLAS_PASSWORD"\nfolder = "INBOX"\n')
    claude = shutil.which("claude")
    if claude is None:
        raise RuntimeError("the claude CLI is not installed (scripts/install-claude-cli)")
    out = {k: v for k, v in env.items() if k != "SYNEDRE_SPAWN_DISABLED"}
    out.update({
        "SYNEDRE_MAILBOXES_FILE": str(box), "SYNEDRE_CLAUDE_BIN": claude,
        "SYNEDRE_ANTHROPIC_BASE_URL": api_url, "SYNEDRE_ANTHROPIC_API_KEY": "sk-ant-faults-not-a-secret",
        "SYNEDRE_SPAWN_SLOT_RETRY_S": str(SLOT_RETRY_S), "SYNEDRE_SPAWN_LOCK_TTL_S": str(LOCK_TTL_S),
        "SYNEDRE_IDLE_TIMEOUT_S": "60", "SYNEDRE_LAUNCH_BUDGET_S": "120",
    })
    return out


@contextmanager
def open_stack(workdir: Path, dovecot: Any, clamd: str, launches: bool = False) -> Iterator[Stack]:
    """Our Redis, the scripted LLM (LLM_DELAY_S a call) and the fleet's environment; on
    exit the fleet, its embedded PostgreSQL and our Redis are stopped, whatever happened.
    `launches`: every message is a `run`, launched by the real CLI against a scripted
    Messages API (`agent_model`), its recap mailed to our SMTP server."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "logs").mkdir(exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    redis = RedisServer(workdir / "redis")
    script = FaultLLM(tag, intents=("run",) if launches else INTENTS)
    llm = start_llm_server(script, delay_s=LLM_DELAY_S)
    env = fleet_env(workdir, tag, redis.url, dovecot, clamd, llm.url)
    st = Stack(workdir, tag, env, redis, llm, script, dovecot, Observer(workdir / "state" / "pgdata", tag))
    with ExitStack() as cleanup:  # each step runs even if one before it raised
        cleanup.callback(llm.stop)
        cleanup.callback(redis.stop)
        if launches:
            st.api = start_claude_api(agent_model())
            cleanup.callback(st.api.stop)
            st.smtp = start_smtp()
            cleanup.callback(st.smtp.stop)
            st.env = launch_env(env, workdir, dovecot, st.api.url, st.smtp)
        cleanup.callback(reap, tag)
        cleanup.callback(stop_database, st)
        cleanup.callback(lambda: st.fleet and st.fleet.stop())
        cleanup.callback(lambda: stack.stop_all(st.spawn_workers))
        cleanup.callback(st.observer.close)
        redis.start()
        yield st


def reap(tag: str) -> list[int]:
    """SIGKILL any process still carrying this stack's FAULTS_RUN mark (an orphaned pool
    child whose worker was killed, a child started after we last looked)."""
    left = []
    for p in psutil.process_iter():
        with suppress(psutil.Error):
            if p.pid != os.getpid() and p.environ().get("FAULTS_RUN") == tag:
                p.kill()
                left.append(p)
    psutil.wait_procs(left, timeout=10)
    return [p.pid for p in left]


def stop_database(st: Stack) -> None:
    """`synedre db stop` with the fleet's environment; SIGKILL the postmaster if that failed."""
    if not (st.pgdata / "PG_VERSION").exists():
        return
    with suppress(subprocess.SubprocessError, OSError):
        subprocess.run([sys.executable, "-m", "synedre.cli", "db", "stop"], env=st.env, cwd=ROOT,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=90)
    info = postmaster(st.pgdata)
    if info is not None and info.process is not None:
        with suppress(psutil.NoSuchProcess):
            info.process.kill()


# -- what happened ---------------------------------------------------------------------------

@dataclass
class Outcome:
    case: str
    delivered: int
    raw_rows: int
    state_rows: int
    done: int
    not_done: dict[int, str]  # message number -> status, for those not terminal
    lost: int  # delivered but no raw row
    duplicated: int  # raw rows beyond one per delivered message, state rows beyond one per raw row
    once_event_duplicates: dict[str, int]  # event -> rows beyond one per message
    materializations: int
    materialized_states: int
    llm_calls: int
    llm_calls_per_message: dict[int, int]
    extra_llm_calls: int  # calls beyond one per message
    extra_llm_outside_fault: list[int]  # messages whose extra call is not explained by the fault
    in_flight_at_fault: int  # messages not yet terminal (or not yet delivered) when the fault began
    fault_start: float
    fault_end: float
    last_done_at: float | None
    statuses: dict[str, int]
    audit: dict[str, int]
    unexpected_prompts: int
    log: str
    notes: list[str] = field(default_factory=list)

    @property
    def recovered_s(self) -> float | None:
        if self.not_done or self.last_done_at is None:
            return None
        return max(0.0, self.last_done_at - self.fault_end)

    def line(self) -> str:
        rec = "never" if self.recovered_s is None else f"{self.recovered_s:.1f}"
        duplicated = self.duplicated + sum(self.once_event_duplicates.values())
        return (f"recovery case={self.case} recovered_s={rec} target_s={RECOVERY_TARGET_S:.0f} "
                f"msgs={self.delivered} lost={self.lost} duplicated={duplicated} "
                f"extra_llm_calls={self.extra_llm_calls} in_flight={self.in_flight_at_fault} "
                f"sweep_reclaimed={self.audit.get('sweep_reclaimed', 0)} not_terminal={len(self.not_done)}")

    def explain(self) -> str:
        some = dict(list(self.not_done.items())[:20])
        return (f"{self.line()}\nstatuses={self.statuses}\naudit={self.audit}\nnot_done={some}"
                f"\nonce_event_duplicates={self.once_event_duplicates}\nnotes={self.notes}\nfleet log: {self.log}")


def collect(st: Stack, case: str, fault_start: float, fault_end: float, in_flight: int) -> Outcome:
    q = st.observer.query
    # the fleet's own incident mails (a message re-offered too often) enter the inbox too:
    # they are not the drained messages, so they are neither lost nor duplicated ones
    subjects = q("SELECT subject FROM synedre.raw_messages WHERE coalesce(subject, '') NOT LIKE %s",
                 ("[Atlas incident]%",))
    numbers = [int(m.group(1)) for (s,) in subjects if (m := st.observer.pattern.search(s or ""))]
    raw_rows = len(subjects)
    per_number: dict[int, int] = defaultdict(int)
    for n in numbers:
        per_number[n] += 1
    (state_rows, states_without_raw), = q(
        "SELECT count(*), count(*) FILTER (WHERE r.id IS NULL) FROM synedre.email_states s"
        " LEFT JOIN synedre.raw_messages r ON r.id = s.message_id")
    (raw_without_state,), = q("SELECT count(*) FROM synedre.raw_messages r WHERE NOT EXISTS"
                              " (SELECT 1 FROM synedre.email_states s WHERE s.message_id = r.id)")
    (incident_rows,), = q("SELECT count(*) FROM synedre.raw_messages WHERE subject LIKE %s", ("[Atlas incident]%",))
    state_rows -= incident_rows
    statuses = dict(q("SELECT status, count(*) FROM synedre.email_states GROUP BY status ORDER BY status"))
    audit = dict(q("SELECT event, count(*) FROM synedre.audit_log GROUP BY event ORDER BY event"))
    once = {e: n for e, n in q(
        "SELECT event, sum(c - 1) FROM (SELECT event, message_id, count(*) AS c FROM synedre.audit_log"
        " WHERE event = ANY(%s) GROUP BY event, message_id) x GROUP BY event", (list(ONCE_EVENTS),)) if n}
    (materializations,), = q(
        "SELECT (SELECT count(*) FROM synedre.runs) + (SELECT count(*) FROM synedre.questions)"
        " + (SELECT count(*) FROM synedre.advices) + (SELECT count(*) FROM synedre.negotiations)")
    (materialized_states,), = q(
        "SELECT count(*) FROM synedre.email_states WHERE coalesce(run_id, question_id, advice_id,"
        " negotiation_id) IS NOT NULL")
    (last_done_at,), = q("SELECT extract(epoch FROM max(status_at))::float8 FROM synedre.email_states"
                         " WHERE status = ANY(%s)", ([str(s) for s in DONE],))
    status_of = st.observer.statuses() or {}
    not_done = {n: status_of.get(n, "(no row)") for n in sorted(st.delivered) if status_of.get(n) not in DONE}
    calls = st.script.snapshot()
    extra = sum(max(0, len(v) - 1) for v in calls.values())
    # A repeated call is the fault's doing only if the first one began before the fault ended
    # (an execution cut off, then re-offered); any other repeat is duplicated work.
    outside = sorted(n for n, v in calls.items() if len(v) > 2 or (len(v) == 2 and v[0] > fault_end))
    return Outcome(
        case=case, delivered=len(st.delivered), raw_rows=raw_rows, state_rows=state_rows,
        done=len(st.delivered) - len(not_done), not_done=not_done,
        lost=len(st.delivered - set(per_number)),
        duplicated=sum(c - 1 for c in per_number.values()) + states_without_raw + raw_without_state
        + max(0, raw_rows - len(numbers)),
        once_event_duplicates=once, materializations=materializations, materialized_states=materialized_states,
        llm_calls=sum(len(v) for v in calls.values()), llm_calls_per_message={n: len(v) for n, v in calls.items()},
        extra_llm_calls=extra, extra_llm_outside_fault=outside,
        in_flight_at_fault=in_flight, fault_start=fault_start, fault_end=fault_end, last_done_at=last_done_at,
        statuses=statuses, audit=audit, unexpected_prompts=len(st.script.unexpected),
        log=str(st.fleet.log if st.fleet else ""))


def expected_statuses(delivered: set[int]) -> dict[str, int]:
    """Where the scripted answers send the messages: noise ends `noise`, the rest materialized."""
    return dict(Counter(str(Status.NOISE if INTENTS[n % len(INTENTS)] == "noise" else Status.MATERIALIZED)
                        for n in delivered))


def in_flight(st: Stack) -> int:
    st_ = st.observer.statuses() or {}
    return sum(1 for n in st.delivered if st_.get(n) not in DONE)


# -- the scenarios ---------------------------------------------------------------------------

def redis_restart_empty(st: Stack, n: int = N_MESSAGES, late: int = 40) -> Outcome:
    """Redis SIGKILLed mid-drain and started again, empty, REDIS_OUTAGE_S later; `late`
    of the `n` messages arrive in the mailbox while it is down."""
    early = n - late
    st.deliver(range(early))
    st.start_fleet()
    at_fault = st.wait_mid_drain(early // 5)
    flying = in_flight(st) + late
    start, end = restart_redis_empty(st, during=lambda: st.deliver(range(early, n)))
    st.wait_all_done(end)
    st.mark("drain over")
    out = collect(st, "redis_restart_empty", start, end, flying)
    out.notes.append(f"statuses at the kill: {at_fault}")
    return out


def postgres_kill(st: Stack, n: int = N_MESSAGES) -> Outcome:
    """The fleet's embedded PostgreSQL SIGKILLed mid-drain (the postmaster, from
    postmaster.pid); the fleet's watchdog must start it again."""
    st.deliver(range(n))
    st.start_fleet()
    at_fault = st.wait_mid_drain(n // 5)
    flying = in_flight(st)
    start, end = kill_postgres(st)
    st.wait_all_done(end)
    st.mark("drain over")
    out = collect(st, "postgres_kill", start, end, flying)
    out.notes.append(f"statuses at the kill: {at_fault}")
    return out


def restart_redis_empty(st: Stack, outage_s: float = REDIS_OUTAGE_S,
                        during: Callable[[], None] | None = None) -> tuple[float, float]:
    """SIGKILL our Redis, run `during`, start it again empty `outage_s` after the kill:
    (time of the kill, time it answers again)."""
    start = st.redis.kill()
    st.mark("redis killed")
    if during is not None:
        during()
    time.sleep(max(0.0, start + outage_s - time.time()))
    end = st.redis.start()
    st.mark("redis restarted empty")
    return start, end


def kill_postgres(st: Stack) -> tuple[float, float]:
    """SIGKILL the postmaster of the fleet's embedded PostgreSQL (from postmaster.pid) and
    wait for the fleet's watchdog to start it again: (time of the kill, time it answers)."""
    info = postmaster(st.pgdata)
    assert info is not None, "no running embedded PostgreSQL under the fleet's state dir"
    old_pid = info.pid
    os.kill(old_pid, signal.SIGKILL)
    start = st.mark("postgres killed")

    def back() -> bool:
        now = postmaster(st.pgdata)
        if now is None or now.pid == old_pid:
            return False
        return st.observer.try_query("SELECT 1") is not None
    wait_for(back, RECOVERY_TARGET_S, "the fleet to restart the embedded PostgreSQL", interval=0.1)
    end = st.mark("postgres back")
    return start, end


def worker_kills(st: Stack, n: int = N_MESSAGES, kills: int = 5, every_s: float = 3.0,
                 seed: int | None = None, groups: tuple[str, ...] = ("ingest", "read", "classify")) -> Outcome:
    """`kills` SIGKILLs, `every_s` apart, each of a worker process drawn at random (main or
    pool child) among the groups that carry this drain (the spawn group does nothing with
    launches disabled). Half the messages are in the mailbox at the start, the other half
    arrive during the kills, so each kill lands mid-drain."""
    rng = random.Random(seed)
    first = n // 2
    st.deliver(range(first))
    st.start_fleet()
    at_fault = st.wait_mid_drain(first // 5)
    flying = in_flight(st) + (n - first)
    assert st.fleet is not None
    feeder = threading.Thread(target=st.deliver, args=(range(first, n), (kills - 1) * every_s / (n - first)),
                              name="deliver", daemon=True)
    start = st.mark("kills begin")
    feeder.start()
    victims = []
    end = start
    for i in range(kills):
        if i:
            time.sleep(every_s)
        victims.append(kill_a_worker(st.fleet, rng, groups))
        end = st.mark(f"killed worker {victims[-1]}")
    feeder.join(60)
    st.wait_all_done(end)
    st.mark("drain over")
    out = collect(st, "worker_kills", start, end, flying)
    out.notes += [f"statuses at the first kill: {at_fault}", f"killed: {victims}"]
    return out


def kill_a_worker(fleet: Fleet, rng: random.Random, groups: tuple[str, ...]) -> str:
    """SIGKILL one of the fleet's worker processes drawn at random; says which."""
    for _ in range(20):
        described = []
        for p in fleet.workers(groups):
            with suppress(psutil.Error):
                described.append((p.cmdline()[-1], _is_pool_child(p), p.pid, p))
        if not described:
            time.sleep(0.5)  # every worker of those groups is being restarted
            continue
        node, child, pid, victim = rng.choice(sorted(described, key=lambda d: d[:3]))
        try:
            victim.kill()
        except psutil.NoSuchProcess:
            continue
        return f"{pid}:{node}:{'pool child' if child else 'main'}"
    raise RuntimeError(f"no worker to kill:\n{fleet.tail()}")


def _is_pool_child(p: psutil.Process) -> bool:
    try:
        parent = p.parent()
        return parent is not None and "worker" in parent.cmdline()
    except psutil.NoSuchProcess:
        return False


SCENARIOS: dict[str, Callable[..., Outcome]] = {
    "redis_restart_empty": redis_restart_empty,
    "postgres_kill": postgres_kill,
    "worker_kills": worker_kills,
}


# -- launches across faults ------------------------------------------------------------------
# The scenarios above run with launches disabled. With `open_stack(launches=True)` every
# message is a `run` that the real `claude` CLI works on (against `agent_model`, through a
# scripted Messages API). These scenarios inject a fault while LAUNCH_LIMIT agents run and
# other messages wait for a slot, then count from outside the fleet: launch rows per message
# (PostgreSQL), agent conversations per message (the scripted API), agent processes per
# message and at once (sampled with psutil), slots and locks left taken (Redis).

N_LAUNCHES = 6
# The fleet-wide cap (SPEC §8), the setting's default: the launch stack leaves it alone.
LAUNCH_LIMIT: int = Settings.model_fields["max_concurrent_launches"].default
# How long the scripted model makes each agent work: AGENT_TURNS commands, the model
# pausing before each, so that an agent keeps streaming events (written to PostgreSQL as
# they come) while some run and the others wait. Two renewal periods of the launch guards
# (LOCK_TTL_S / 3 each): the Redis scenario kills Redis just after the running launches'
# first renewal, and their agents must still work at the second one, Redis back by then.
AGENT_WORK_S = 2 * LOCK_TTL_S / 3
AGENT_TURNS = 8
# Redis stays down this long in the launch scenarios: back well before that second renewal,
# which then finds the locks and slots gone.
LAUNCH_REDIS_OUTAGE_S = 3.0
# SYNEDRE_SPAWN_SLOT_RETRY_S: a launch that found every slot taken comes back this soon (the
# default, 30 s, would stretch a handful of queued launches over minutes).
SLOT_RETRY_S = 2
# Spawn workers started beside the fleet's own, as during a rolling deploy (SPEC §12b): the
# pools can then run twice the cap, so only the fleet-wide guards keep the agents at it.
EXTRA_SPAWN_WORKERS = 1
SAMPLE_EVERY_S = 0.05
# After a fault, the longest the queued launches may wait for the next agent to start: a
# slot whose holder vanished with the fault ages out after its lease (LOCK_TTL_S), and the
# sweep offers the waiting messages again every SWEEP_EVERY_S. Longer: a slot leaked.
NEXT_LAUNCH_BOUND_S = LOCK_TTL_S + SWEEP_EVERY_S
# How long after a renewal was due it is taken as done (the heartbeat's round trip to Redis).
RENEWAL_MARGIN_S = 1.5
LEAN_CONTRACT = json.dumps({"ok": True, "tenant": None, "commits": [], "summary_md": "Analysis done, nothing to code."})


def agent_model() -> ScriptedModel:
    """Every agent: a look at its clone, AGENT_TURNS short commands over AGENT_WORK_S, a valid
    lean contract (no tenant, no commits: no deploy, the recap follows), the end."""
    work = [step for i in range(AGENT_TURNS) for step in (Sleep(AGENT_WORK_S / AGENT_TURNS),
                                                           [bash(f"echo working {i}")])]
    return ScriptedModel([[bash("git status --short")], *work,
                          [bash(f"printf '%s' '{LEAN_CONTRACT}' > \"$SYNEDRE_CONTRACT_PATH\"")],
                          [text("Done.")]])


def fleet_database_url(fleet: Fleet) -> str:
    """The URL the fleet hands its children: its embedded server's application role, on a
    socket that stays the same across the server's restarts. (Read from a child that keeps
    its environment readable: Celery's process titles overwrite the workers'.)"""
    def found() -> str | None:
        for p in fleet.descendants():
            with suppress(psutil.Error):
                if url := p.environ().get("SYNEDRE_DATABASE_URL"):
                    return url
        return None
    return wait_for(found, 30, "a fleet worker's SYNEDRE_DATABASE_URL")


def start_launch_fleet(st: Stack) -> Fleet:
    """The fleet, the founder in its directory (recaps and alerts go to nobody else), then
    EXTRA_SPAWN_WORKERS spawn workers of the fleet's size on its database and Redis."""
    fleet = st.start_fleet()
    env = {**st.env, "SYNEDRE_DATABASE_URL": fleet_database_url(fleet)}
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", str(stack.CORPUS / "directory.json")],
                   env=env, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=True)
    for _ in range(EXTRA_SPAWN_WORKERS):
        st.spawn_workers.append(stack.celery_worker(env, st.workdir / "logs", queues="spawn",
                                                    concurrency=WORKER_GROUPS["spawn"].concurrency))
    st.mark("founder imported, extra spawn workers ready")
    return fleet


@dataclass
class AgentProc:
    pid: int
    number: int | None  # the message's, from the FAULT token in its prompt
    created: float
    first_seen: float
    last_seen: float


class AgentSampler(threading.Thread):
    """Every `every_s`, the fleet's live agents, seen from outside: processes of the CLI's
    executable whose command line is a stream-json launch naming a path under our state
    directory (its clone, its settings). A process the CLI forked that has not exec'd yet
    still shows the CLI's command line, so only those whose parent is not an agent count.
    Each agent's message is the FAULT token of its prompt (its last argument)."""

    def __init__(self, state_dir: Path, pattern: re.Pattern[str], claude_bin: str, every_s: float = SAMPLE_EVERY_S,
                 on_change: Callable[[tuple[int, ...]], None] | None = None):
        super().__init__(daemon=True, name="agent-sampler")
        self.on_change = on_change  # called with the live agents' messages whenever they change
        self.root = str(state_dir.resolve())
        # the CLI names its process after its command (`claude`), else /proc's comm is the
        # executable's name, cut at 15 characters
        self.names = {Path(claude_bin).name[:15], Path(os.path.realpath(claude_bin)).name[:15]}
        self.pattern, self.every_s = pattern, every_s
        self.procs: dict[tuple[int, float], AgentProc] = {}
        self.samples: list[tuple[float, int]] = []  # (time, agents alive)
        self.peak, self.peak_at, self.peak_numbers = 0, 0.0, ()
        self.errors: list[str] = []
        self._last: tuple[int, ...] = ()
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def scan(self) -> list[AgentProc]:
        now = time.time()
        found: dict[int, tuple[int, float, list[str]]] = {}
        for p in psutil.process_iter(["name"]):
            if p.info["name"] not in self.names:
                continue
            with suppress(psutil.Error):
                cmd = p.cmdline()
                if "stream-json" in cmd and any(self.root in a for a in cmd):
                    found[p.pid] = (p.ppid(), p.create_time(), cmd)
        live = []
        with self._lock:
            for pid, (ppid, created, cmd) in found.items():
                if ppid in found:
                    continue
                proc = self.procs.get((pid, created))
                if proc is None:
                    m = self.pattern.search(cmd[-1] if cmd else "") or self.pattern.search(" ".join(cmd))
                    proc = self.procs[(pid, created)] = AgentProc(pid, int(m.group(1)) if m else None, created,
                                                                  now, now)
                proc.last_seen = now
                live.append(proc)
            self.samples.append((now, len(live)))
            numbers = tuple(sorted(p.number if p.number is not None else -1 for p in live))
            if len(live) > self.peak:
                self.peak, self.peak_at, self.peak_numbers = len(live), now, numbers
            changed, self._last = numbers != self._last, numbers
        if changed and self.on_change is not None:
            self.on_change(numbers)
        return live

    def live(self) -> list[AgentProc]:
        """The agents alive at the last sample."""
        with self._lock:
            if not self.samples:
                return []
            at = self.samples[-1][0]
            return [p for p in self.procs.values() if p.last_seen == at]

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.scan()
            except Exception as exc:  # noqa: BLE001 - kept: a sampler that stopped would under-count
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            self._halt.wait(self.every_s)

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(10)

    def per_message(self) -> dict[int, int]:
        with self._lock:
            return dict(Counter(p.number for p in self.procs.values() if p.number is not None))

    def max_gap_s(self) -> float:
        with self._lock:
            times = [t for t, _ in self.samples]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


@dataclass
class Conversation:
    sessions: set[str] = field(default_factory=set)
    first_requests: int = 0  # main requests carrying no assistant turn yet: an agent's opening
    steps: set[int] = field(default_factory=set)


def conversations(api: ClaudeAPI, pattern: re.Pattern[str]) -> dict[int, Conversation]:
    """What the scripted Messages API saw, per message (the FAULT token of the first user
    message of each agent's requests)."""
    out: dict[int, Conversation] = defaultdict(Conversation)
    for r in api.main_requests():
        first = (r.body.get("messages") or [{}])[0]
        found = pattern.search(json.dumps(first, ensure_ascii=False))
        if not found:
            continue
        c = out[int(found.group(1))]
        c.sessions.add(r.headers.get("x-claude-code-session-id") or f"(no session header {id(r)})")
        c.first_requests += r.step == 0
        c.steps.add(r.step or 0)
    return dict(out)


def launch_rows(st: Stack) -> dict[int, list[dict[str, Any]]] | None:
    """Message number -> its launch rows (None: the database is down)."""
    rows = st.observer.try_query(
        "SELECT r.subject, l.status, l.stop_reason, extract(epoch FROM l.started_at)::float8,"
        " extract(epoch FROM l.ended_at)::float8 FROM synedre.launches l"
        " JOIN synedre.raw_messages r ON r.id = l.message_id ORDER BY l.id")
    if rows is None:
        return None
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for subject, status, reason, started, ended in rows:
        if found := st.observer.pattern.search(subject or ""):
            out[int(found.group(1))].append({"status": status, "stop_reason": reason, "started": started,
                                             "ended": ended})
    return dict(out)


def wait_launches_mid_run(st: Stack, sampler: AgentSampler, queued: int = 2, renewed: bool = False,
                          timeout: float = 180.0) -> dict[str, Any]:
    """Until LAUNCH_LIMIT agents are mid-work (past their first turn, not yet at their
    contract) while at least `queued` messages wait for a slot (materialized, no launch);
    `renewed`: and each of those launches has renewed its lock and slot once (their
    heartbeats start before the launch row, and renew every LOCK_TTL_S / 3). Returns who
    runs and who waits."""
    assert st.api is not None
    state: dict[str, Any] = {}

    def reached() -> bool:
        if st.fleet is not None and not st.fleet.alive():
            raise RuntimeError(f"the fleet exited:\n{st.fleet.tail()}")
        live = [p.number for p in sampler.live()]
        talks = conversations(st.api, st.observer.pattern)
        working = [n for n in live if n in talks and 1 <= max(talks[n].steps) < AGENT_TURNS - 2]
        statuses = st.observer.statuses() or {}
        rows = launch_rows(st) or {}
        waiting = [n for n in sorted(st.delivered) if statuses.get(n) == Status.MATERIALIZED and n not in rows]
        state.update(running=sorted(working), queued=waiting, statuses=dict(Counter(statuses.values())))
        if renewed and working:
            first_renewal = max(rows[n][0]["started"] for n in working if n in rows) + LOCK_TTL_S / 3
            if time.time() < first_renewal + RENEWAL_MARGIN_S:
                return False
        return len(working) >= LAUNCH_LIMIT and len(waiting) >= queued
    try:
        wait_for(reached, timeout, f"{LAUNCH_LIMIT} agents mid-run and {queued} launches queued", interval=0.1)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; {state}; database: {st.observer.last_error}\n{st.fleet and st.fleet.tail()}") \
            from None
    st.mark(f"mid-run: agents {state['running']}, queued {state['queued']}")
    return state


def launches_settled(st: Stack, sampler: AgentSampler) -> bool:
    """Every delivered message terminal, each with a launch row and none of them running, and
    no agent alive."""
    statuses, rows = st.observer.statuses(), launch_rows(st)
    if statuses is None or rows is None:
        return False
    return (all(statuses.get(n) in TERMINAL for n in st.delivered)
            and all(rows.get(n) and all(r["status"] != LaunchStatus.RUNNING for r in rows[n]) for n in st.delivered)
            and not sampler.live())


@dataclass
class LaunchOutcome:
    case: str
    messages: int
    rows: dict[int, list[dict[str, Any]]]  # number -> its launch rows
    talks: dict[int, Conversation]  # number -> what the scripted API saw of its agents
    processes: dict[int, int]  # number -> agent processes seen
    unattributed: int  # agent processes whose prompt named no message of ours
    peak: int
    peak_numbers: tuple[int, ...]
    rows_overlap: int  # most launch rows running at once, from their own start and end times
    running_at_fault: list[int]
    queued_at_fault: list[int]
    fault_start: float
    fault_end: float
    next_launch_at: float | None  # first agent process started after the fault began
    handover_s: float | None  # from the first agent to end after the fault to the next one's start
    settled_at: float | None
    statuses: dict[int, str]
    slots_left: int | None
    locks_left: int | None
    max_gap_s: float
    sampler_errors: list[str]
    audit: dict[str, int]
    drafts: dict[int, int]
    finishes: dict[int, int]  # number -> launch verdicts audited (spawn_action_done, spawn_failed)
    mails: dict[int, int]  # number -> mails the founder got about it (its recap, or its alert)
    log: str
    notes: list[str] = field(default_factory=list)

    @property
    def double_launches(self) -> dict[int, tuple[int, int, int, int]]:
        """number -> (launch rows, API sessions, first requests, agent processes), where one is over 1."""
        out = {}
        for n in sorted(set(self.rows) | set(self.talks) | set(self.processes)):
            talk = self.talks.get(n, Conversation())
            counts = (len(self.rows.get(n, [])), len(talk.sessions), talk.first_requests, self.processes.get(n, 0))
            if max(counts) > 1:
                out[n] = counts
        return out

    @property
    def terminal_rows(self) -> int:
        return sum(1 for rs in self.rows.values() for r in rs if r["status"] != LaunchStatus.RUNNING)

    @property
    def total_rows(self) -> int:
        return sum(len(rs) for rs in self.rows.values())

    @property
    def next_launch_s(self) -> float | None:
        return None if self.next_launch_at is None else max(0.0, self.next_launch_at - self.fault_end)

    @property
    def settled_s(self) -> float | None:
        return None if self.settled_at is None else self.settled_at - self.fault_end

    def line(self) -> str:
        nxt = "never" if self.next_launch_s is None else f"{self.next_launch_s:.1f}"
        handover = "never" if self.handover_s is None else f"{self.handover_s:.1f}"
        settled = "never" if self.settled_s is None else f"{self.settled_s:.1f}"
        reasons = Counter(f"{r['status']}/{r['stop_reason']}" for rs in self.rows.values() for r in rs)
        return (f"launches case={self.case} msgs={self.messages} double_launches={len(self.double_launches)} "
                f"peak_concurrent={self.peak} (rows {self.rows_overlap}) limit={LAUNCH_LIMIT} "
                f"terminal_rows={self.terminal_rows}/{self.total_rows} running_at_fault={len(self.running_at_fault)} "
                f"queued_at_fault={len(self.queued_at_fault)} next_launch_s={nxt} handover_s={handover} "
                f"bound_s={NEXT_LAUNCH_BOUND_S:.0f} "
                f"settled_s={settled} slots_left={self.slots_left} locks_left={self.locks_left} "
                f"sample_gap_max_s={self.max_gap_s:.2f} outcomes={dict(sorted(reasons.items()))}")

    def explain(self) -> str:
        return (f"{self.line()}\ndouble={self.double_launches}\nstatuses={self.statuses}\n"
                f"rows={ {n: [(r['status'], r['stop_reason']) for r in rs] for n, rs in sorted(self.rows.items())} }\n"
                f"processes={self.processes} unattributed={self.unattributed} peak_numbers={self.peak_numbers}\n"
                f"running_at_fault={self.running_at_fault} queued_at_fault={self.queued_at_fault}\n"
                f"audit={self.audit}\nsampler_errors={self.sampler_errors}\nnotes={self.notes}\nfleet log: {self.log}")


def _redis_slots(st: Stack) -> int | None:
    import redis

    try:
        return LaunchSemaphore(redis.Redis(port=st.redis.port, socket_timeout=1, socket_connect_timeout=1),
                               name=SLOTS_KEY, limit=LAUNCH_LIMIT).in_use()
    except Exception:  # noqa: BLE001 - Redis is down (the fault)
        return None


def _redis_leftovers(st: Stack) -> tuple[int | None, int | None]:
    """Launch slots still taken, launch locks still held, in our Redis."""
    import redis

    from synedre.spawn.locks import LOCK_PREFIX

    try:
        r = redis.Redis(port=st.redis.port, socket_timeout=2)
        return (LaunchSemaphore(r, name=SLOTS_KEY, limit=LAUNCH_LIMIT).in_use(),
                sum(1 for _ in r.scan_iter(match=LOCK_PREFIX + "*")))
    except Exception:  # noqa: BLE001 - reported as unknown, and the assertion says so
        return None, None


def _finishes(st: Stack) -> dict[int, int]:
    """Message number -> the launch verdicts written for it (the audit of each launch's end)."""
    rows = st.observer.query(
        "SELECT r.subject FROM synedre.audit_log a JOIN synedre.raw_messages r ON r.id = a.message_id"
        " WHERE a.event = ANY(%s)", (["spawn_action_done", str(Status.SPAWN_FAILED)],))
    return dict(Counter(int(m.group(1)) for (subject,) in rows if (m := st.observer.pattern.search(subject or ""))))


def collect_launches(st: Stack, sampler: AgentSampler, case: str, fault_start: float, fault_end: float,
                     at_fault: dict[str, Any], settled_at: float | None) -> LaunchOutcome:
    assert st.api is not None and st.smtp is not None
    rows = launch_rows(st) or {}
    spans = [(r["started"], r["ended"] or time.time()) for rs in rows.values() for r in rs]
    overlap = max((sum(1 for s2, e2 in spans if s2 <= s1 < e2) for s1, _ in spans), default=0)
    # the leftovers once the last launch released them (a release follows the row's write)
    with suppress(TimeoutError):
        wait_for(lambda: _redis_leftovers(st) == (0, 0), 10, "launch slots and locks released", interval=0.2)
    slots, held = _redis_leftovers(st)
    with sampler._lock:
        procs = list(sampler.procs.values())
    after = [p.first_seen for p in procs if p.first_seen > fault_start]
    ended = min((p.last_seen for p in procs if fault_end < p.last_seen < sampler.samples[-1][0]), default=None)
    handover = None if ended is None else min((p.first_seen - ended for p in procs if p.first_seen > ended),
                                              default=None)
    return LaunchOutcome(
        case=case, messages=len(st.delivered), rows=rows, talks=conversations(st.api, st.observer.pattern),
        processes=sampler.per_message(), unattributed=sum(1 for p in procs if p.number is None),
        peak=sampler.peak, peak_numbers=sampler.peak_numbers, rows_overlap=overlap,
        running_at_fault=at_fault["running"], queued_at_fault=at_fault["queued"],
        fault_start=fault_start, fault_end=fault_end, next_launch_at=min(after, default=None), handover_s=handover,
        settled_at=settled_at, statuses=st.observer.statuses() or {}, slots_left=slots, locks_left=held,
        max_gap_s=sampler.max_gap_s(), sampler_errors=list(sampler.errors),
        audit=dict(st.observer.query("SELECT event, count(*) FROM synedre.audit_log GROUP BY event ORDER BY event")),
        drafts={n: len(v) for n, v in st.script.drafts.items()}, finishes=_finishes(st),
        mails=dict(Counter(int(m.group(1)) for r in st.smtp.messages()
                           if (m := st.observer.pattern.search(r.data.decode(errors="replace"))))),
        log=str(st.fleet.log if st.fleet else ""))


def _launches_across(st: Stack, case: str, fault: Callable[[], tuple[float, float]],
                     renewed: bool = False) -> LaunchOutcome:
    """N_LAUNCHES messages through the fleet with launches on; `fault` lands while
    LAUNCH_LIMIT agents are mid-run (`renewed`: after their guards' first renewal) and others
    wait for a slot; then until everything settles (or NEXT_LAUNCH_BOUND_S plus the queued
    waves' time past the fault's end)."""
    start_launch_fleet(st)

    def changed(numbers: tuple[int, ...]) -> None:  # for the timeline: who runs, and Redis's slots
        slots = _redis_slots(st)
        st.mark(f"agents {list(numbers)}; redis slots {slots if slots is not None else '(down)'}")
    sampler = AgentSampler(st.pgdata.parent, st.observer.pattern, st.env["SYNEDRE_CLAUDE_BIN"], on_change=changed)
    sampler.start()
    try:
        st.deliver(range(N_LAUNCHES))
        at_fault = wait_launches_mid_run(st, sampler, renewed=renewed)
        start, end = fault()
        waves = math.ceil(N_LAUNCHES / LAUNCH_LIMIT)
        deadline = end + NEXT_LAUNCH_BOUND_S + waves * (AGENT_WORK_S + 15.0)
        settled_at = None
        while time.time() < deadline:
            if launches_settled(st, sampler):
                settled_at = time.time()
                break
            time.sleep(0.25)
        st.mark("launches settled" if settled_at else "gave up waiting for the launches to settle")
    finally:
        sampler.stop()
    return collect_launches(st, sampler, case, start, end, at_fault, settled_at)


def launches_redis_restart_empty(st: Stack, outage_s: float = LAUNCH_REDIS_OUTAGE_S) -> LaunchOutcome:
    """Redis SIGKILLed while LAUNCH_LIMIT agents run and others are queued, started again
    empty `outage_s` later: every lock, slot and queued task is gone. The kill comes just
    after the running launches renewed their guards, so that they run on for most of a
    renewal period without them; and the sweep runs as soon as Redis answers (as beat's
    might: it runs every SWEEP_EVERY_S): the worst case for the cap, since the waiting
    messages are offered again at once."""
    def fault() -> tuple[float, float]:
        start, end = restart_redis_empty(st, outage_s)
        run_sweep(st)
        return start, end
    return _launches_across(st, "launches_redis_restart_empty", fault, renewed=True)


def run_sweep(st: Stack) -> None:
    """The sweep, now, as an operator would (`celery call`) and as beat does every
    SWEEP_EVERY_S."""
    subprocess.run([sys.executable, "-m", "celery", "-A", "tasks", "call", "synedre.sweep"], env=st.env, cwd=ROOT,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=True)
    st.mark("sweep sent")


def launches_postgres_kill(st: Stack) -> LaunchOutcome:
    """The embedded PostgreSQL's postmaster SIGKILLed while LAUNCH_LIMIT agents run and
    others are queued; the fleet's watchdog starts it again."""
    return _launches_across(st, "launches_postgres_kill", lambda: kill_postgres(st))
