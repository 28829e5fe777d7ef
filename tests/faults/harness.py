"""The recovery suite's machinery, shared by tests/faults/test_recovery.py and bench/recovery.py.

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
import os
import random
import re
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

from synedre.pipeline import TERMINAL, Status
from tests.services import stack
from tests.services.llm_server import HTTPError, LLMServer, start_llm_server

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
    number) and records when each message's prompts arrived."""

    def __init__(self, tag: str):
        self.pattern = re.compile(rf"FAULT-{re.escape(tag)}-(\d+)")
        self.calls: dict[int, list[float]] = defaultdict(list)  # message number -> time.time()
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
        with self._lock:
            self.calls[n].append(time.time())
        return json.dumps({"intent": INTENTS[n % len(INTENTS)], "complexity": "leger", "confidence": 0.9,
                           "rationale": "scripted by the fault suite"})

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
            if not any("celery" in a for a in argv) or "worker" not in argv:
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
        "SYNEDRE_LOG_FORMAT": "console", "FAULTS_RUN": tag,
    })
    return env


@contextmanager
def open_stack(workdir: Path, dovecot: Any, clamd: str) -> Iterator[Stack]:
    """Our Redis, the scripted LLM (LLM_DELAY_S a call) and the fleet's environment; on
    exit the fleet, its embedded PostgreSQL and our Redis are stopped, whatever happened."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "logs").mkdir(exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    redis = RedisServer(workdir / "redis")
    script = FaultLLM(tag)
    llm = start_llm_server(script, delay_s=LLM_DELAY_S)
    env = fleet_env(workdir, tag, redis.url, dovecot, clamd, llm.url)
    st = Stack(workdir, tag, env, redis, llm, script, dovecot, Observer(workdir / "state" / "pgdata", tag))
    with ExitStack() as cleanup:  # each step runs even if one before it raised
        cleanup.callback(llm.stop)
        cleanup.callback(redis.stop)
        cleanup.callback(reap, tag)
        cleanup.callback(stop_database, st)
        cleanup.callback(lambda: st.fleet and st.fleet.stop())
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
    start = st.redis.kill()
    st.mark("redis killed")
    st.deliver(range(early, n))
    time.sleep(max(0.0, start + REDIS_OUTAGE_S - time.time()))
    end = st.redis.start()
    st.mark("redis restarted empty")
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
    st.wait_all_done(end)
    st.mark("drain over")
    out = collect(st, "postgres_kill", start, end, flying)
    out.notes.append(f"statuses at the kill: {at_fault}")
    return out


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
