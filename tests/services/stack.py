"""Real services for tests and benchmarks: embedded PostgreSQL, Celery processes, helpers."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.services.dovecot import Dovecot

ROOT = Path(__file__).resolve().parents[2]


def per_worker(redis_url: str) -> str:
    """Under pytest-xdist each worker (gw0, gw1, …) gets a Redis database of its own: the one
    given, then the next ones, so that two workers never share a queue, a lock or a flush.
    The suite's databases are 12-15 and the lock tests' 4-7: four workers at most."""
    from urllib.parse import urlsplit, urlunsplit

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return redis_url
    u = urlsplit(redis_url)
    number = int(u.path.strip('/') or 0) + int(worker[2:])
    if number > 15:
        raise RuntimeError(f"{redis_url} for xdist worker {worker}: Redis database {number} does not exist "
                           "(at most four test workers)")
    return urlunsplit(u._replace(path=f"/{number}"))


TEST_REDIS_URL = per_worker(os.environ.get("SYNEDRE_TEST_REDIS_URL", "redis://127.0.0.1:6379/12"))
# The shared corpus beside the checkout when there is one; else the copy kept in tests/
# (a CI clone may have no ../shared).
CORPUS = next(p for p in (ROOT.parent / "shared" / "corpus", ROOT / "tests" / "corpus")
              if (p / "cases.json").is_file())


def start_pg(pgdata: Path):
    """An embedded PostgreSQL 16 with pgvector; returns the server handle (get_uri())."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    return pgserver.get_server(pgdata, cleanup_mode="stop")


def q(url: str, sql: str, *args: object) -> list:
    """The rows of one query on its own connection (the tests' look into PostgreSQL)."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


def git(repo: Path, *args: str) -> str:
    """git in `repo`, with an identity for commits; its output, stripped."""
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@x", *args], check=True,
                          capture_output=True, text=True, timeout=30).stdout.strip()


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.2):
    """`predicate()`'s first true value, looked at every `interval` s. A look is often a query
    on a connection of its own (`q`: ~5 ms of CPU with its server process): every 50 ms that
    was a tenth of a core for each waiting test. A test bounding a latency says its interval."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def mailbox_env(dovecot: Dovecot, directory: Path, mailbox: str = "atlas", smtp: Any = None) -> dict[str, str]:
    """The registry file of one mailbox on `dovecot` (IMAP) and `smtp` (an SMTP sink; none: a
    port 25 nothing sends to), written in `directory`, and the environment that names it."""
    host, port = (smtp.host, smtp.port) if smtp is not None else (dovecot.host, 25)
    path = directory / "mailboxes.toml"
    path.write_text(
        f'[mailboxes.{mailbox}]\nimap_host = "{dovecot.host}"\nimap_port = {dovecot.port}\n'
        f'imap_tls = false\nsmtp_host = "{host}"\nsmtp_port = {port}\nsmtp_tls = false\n'
        f'username = "{dovecot.username}"\npassword_env = "TEST_ATLAS_PASSWORD"\nfolder = "INBOX"\n')
    return {"SYNEDRE_MAILBOXES_FILE": str(path), "TEST_ATLAS_PASSWORD": dovecot.password}


def status_start_s(env: dict[str, str]) -> float:
    """How long `synedre status` takes to start here, now: a process importing what it imports
    before its probes' clock starts (PROBES_BOUND_S bounds the probes, not the start, which a
    loaded 2-core machine stretches to seconds)."""
    code = ("import importlib, synedre.cli, synedre.health, tasks.app\n"
            "from synedre.ai.providers import PROVIDERS\n"
            "[importlib.import_module(p.sdk) for p in PROVIDERS.values() if p.url_variable]")
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, timeout=60, check=True)
    return time.monotonic() - started


def site_repo(path: Path, file: str = "README", text: str = "site\n", message: str = "init") -> Path:
    """A repository at `path` whose `preprod` branch holds one commit of one file."""
    path.mkdir()
    git(path, "init", "-q", "-b", "preprod")
    (path / file).write_text(text)
    git(path, "add", file)
    git(path, "commit", "-qm", message)
    return path


def message_at(url: str, state_dir: Path, tag: str, status: str, complexity: str = "plan", *, intent: str = "run",
               client: str | None = None, uid: int | None = None, **columns: object) -> int:
    """The corpus's P02 ingested under a Message-ID of its own (`tag`), given a run and moved to
    `status` as the stages before would leave it; `client` by codename, `columns` more of its
    email_states columns."""
    import psycopg
    from psycopg import sql

    from synedre.config import Settings
    from synedre.stages.poll import ingest_one

    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    raw = raw.replace(b"Message-ID: <", f"Message-ID: <{tag}.".encode(), 1)
    uid = int(time.time() * 1000) % 10**9 if uid is None else uid
    mid = ingest_one(raw, "atlas", 1, uid, Settings(state_dir=state_dir), lambda _: None)
    with psycopg.connect(url, autocommit=True) as conn:
        run = conn.execute("INSERT INTO synedre.runs (ref_type, ref_id, title, complexity)"
                           " VALUES ('atlas_inbox', %s, 't', %s) RETURNING id", (str(mid), complexity)).fetchone()[0]
        values = {"status": status, "intent": intent, "complexity": complexity, "confidence": 0.9, **columns,
                  "run_id": run}
        sets = [sql.SQL("{} = %s").format(sql.Identifier(k)) for k in values]
        if client is not None:
            sets.append(sql.SQL("client_id = (SELECT id FROM synedre.clients WHERE codename = %s)"))
        update = sql.SQL("UPDATE synedre.email_states SET {} WHERE message_id = %s").format(sql.SQL(", ").join(sets))
        conn.execute(update, (*values.values(), *([client] if client is not None else []), mid))
    return mid


class Proc:
    """A child process in its own session, its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path):
        self.name = name
        self.log = log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=self._out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._signalled = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_output(self, needle: str, timeout: float = 30) -> None:
        def seen():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.output()[-3000:]}")
            return needle in self.output()
        wait_for(seen, timeout, f"{needle!r} from {self.name}", interval=0.1)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: int = signal.SIGTERM) -> None:
        """Sends `sig` once: SIGTERM to the process alone (a Celery worker's warm shutdown then
        stops its own pool; its pool children signalled too would die under it, mid-task),
        any other signal (Ctrl-C's SIGINT, SIGKILL) to its whole process group, as a terminal would."""
        if self.proc.poll() is None and not self._signalled:
            self._signalled = True
            try:
                if sig == signal.SIGTERM:
                    os.kill(self.proc.pid, sig)
                else:
                    os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Signals it (`send`) and waits; SIGKILL to whatever of its group is left then."""
        self.send(sig)
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)
        self._out.close()
        return self.proc.returncode

    def end(self) -> int:
        """The test is done with it: its whole group killed at once. A Celery worker's warm
        shutdown takes ~2 s whatever the signal, paid by every teardown; nothing it would do
        in that time matters to a test that is over (its log is written record by record)."""
        return self.stop(signal.SIGKILL)


def worker_argv(queues: str, concurrency: int, pool: str = "prefork", module: list[str] | None = None) -> list[str]:
    return [sys.executable, *(module or ["-m", "tasks"]), "worker",
            "--loglevel", "INFO", "-Q", queues, "-c", str(concurrency), "-P", pool,
            "-n", f"test-{uuid.uuid4().hex[:8]}@%h", "--without-gossip", "--without-mingle"]


def celery_worker(env: dict[str, str], log_dir: Path, queues: str = "poll", concurrency: int = 2,
                  pool: str = "prefork", module: list[str] | None = None) -> Proc:
    worker = Proc("worker", worker_argv(queues, concurrency, pool, module), env, log_dir)
    worker.wait_output(" ready.", timeout=60)
    return worker


def celery_workers(env: dict[str, str], log_dir: Path, *groups: tuple[str, int] | tuple[str, int, str]) -> list[Proc]:
    """One worker per (queues, concurrency[, pool]), booted side by side: ready once all are."""
    return ready([Proc("worker", worker_argv(*group), env, log_dir) for group in groups])


def ready(workers: list[Proc]) -> list[Proc]:
    """Workers started side by side, once each said it is ready; all stopped if one fails."""
    try:
        for w in workers:
            w.wait_output(" ready.", timeout=60)
    except BaseException:
        stop_all(workers)
        raise
    return workers


def stop_all(procs: Iterable[Any], graceful: bool = False) -> None:
    """Ends them at a test's end, side by side: each process killed at once (`Proc.end`), or
    `graceful`ly stopped (`Proc.stop`: a worker finishes its task first) when what follows
    reads what their last tasks wrote; then each waited for (anything else with a `stop`, a
    scripted server, stopped in turn)."""
    procs = list(procs)
    sig = signal.SIGTERM if graceful else signal.SIGKILL
    for p in procs:
        if isinstance(p, Proc):
            p.send(sig)
    for p in procs:
        p.stop(sig) if isinstance(p, Proc) else p.stop()


def spawn_one(env: dict[str, str], log_dir: Path, mid: int, done: Callable[[], object], timeout: float, what: str,
              concurrency: int = 2) -> Proc:
    """A spawn worker launches message `mid` and is stopped once `done()` (or on a failure);
    the worker, its output still readable."""
    worker = celery_worker(env, log_dir, queues="spawn", concurrency=concurrency)
    try:
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        wait_for(done, timeout, what, interval=0.5)
    finally:
        worker.stop()
    return worker


def celery_beat(env: dict[str, str], log_dir: Path) -> Proc:
    return Proc("beat", [sys.executable, "-m", "tasks", "beat", "--loglevel",
                         "INFO", "-S", "redbeat.RedBeatScheduler"], env, log_dir)


def idle_watcher(env: dict[str, str], log_dir: Path) -> Proc:
    proc = Proc("idle", [sys.executable, "-m", "synedre.cli", "idle"], env, log_dir)
    proc.wait_output("idle_watching", timeout=30)
    return proc
