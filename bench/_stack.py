"""Start the real services a benchmark needs, in one temporary directory.

Every benchmark runs from a plain shell with no variable set: this process and the
workers it starts use one broker, a Redis database of the benchmarks' own (9 unless
SYNEDRE_BENCH_REDIS_URL says otherwise: tests use 13 and 11, helpers 5 to 7). It is
flushed before and after a run, so it is never the fleet's broker.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

BENCH_REDIS_URL = os.environ.get("SYNEDRE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
# Before anything reads synedre's settings (the Celery app reads its broker at import):
# a task this process sends goes where its workers listen, not to the default database 0.
os.environ["SYNEDRE_BROKER_URL"] = BENCH_REDIS_URL

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.services import stack  # noqa: E402
from tests.services.dovecot import start_dovecot  # noqa: E402

CORPUS = stack.CORPUS


def all_ready(procs: list[stack.Proc], timeout: float) -> list[stack.Proc]:
    """`procs` once each Celery worker among them says it is ready; all stopped if one is not."""
    try:
        for p in procs:
            p.wait_output(" ready.", timeout)
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return procs


def corpus_messages(n: int, tag: str, clean: bool = False) -> list[bytes]:
    """n distinct messages cycling over the corpus, each with its own Message-ID;
    `clean`: only those without attachments."""
    bases = [p.read_bytes() for p in sorted((CORPUS / "cases").glob("*.eml"))]
    if clean:
        bases = [b for b in bases if b"Content-Disposition: attachment" not in b
                 and b"image/" not in b]
    out = []
    for i in range(n):
        raw = re.sub(rb"(?im)^Message-ID:.*\r?\n", b"", bases[i % len(bases)])
        out.append(f"Message-ID: <bench-{tag}-{i}@synedre.test>\r\n".encode() + raw)
    return out


class IdleFloor:
    """The IMAP server's own floor: APPEND -> its EXISTS on a bare IDLE connection to `folder`,
    nothing else in between. A folder other than INBOX can be sampled while the fleet watches
    INBOX (Dovecot's notification delay does not depend on the folder); `close` deletes what
    was appended."""

    def __init__(self, dovecot, folder: str = "INBOX"):
        self.folder = folder
        self.watcher, self.sender = dovecot.client(), dovecot.client()
        if not self.sender.folder_exists(folder):
            self.sender.create_folder(folder)
        self.watcher.select_folder(folder, readonly=True)
        self.samples: list[float] = []

    def sample(self, raw: bytes) -> float:
        self.watcher.idle()
        try:
            t0 = time.perf_counter()
            self.sender.append(self.folder, raw)
            while not any(r[1] == b"EXISTS" for r in self.watcher.idle_check(timeout=5) if len(r) > 1):
                if time.perf_counter() - t0 > 30:
                    raise TimeoutError(f"no EXISTS on {self.folder} 30 s after an APPEND")
            self.samples.append(time.perf_counter() - t0)
        finally:
            self.watcher.idle_done()
        return self.samples[-1]

    def close(self) -> None:
        self.sender.select_folder(self.folder)
        self.sender.delete_messages(self.sender.search("ALL"))
        self.sender.expunge()
        for c in (self.watcher, self.sender):
            c.logout()


def _use_bench_broker() -> None:
    """Point this process's settings, Redis client and Celery app at the bench's broker,
    even if one of them was loaded before the environment was set; check the app's."""
    from kombu import Connection

    from synedre import kv
    from synedre.config import get_settings

    get_settings.cache_clear()
    kv.client.cache_clear()
    from tasks.app import app

    if app.conf.broker_url != BENCH_REDIS_URL:
        app.conf.broker_url = BENCH_REDIS_URL
    sending_to = app.connection_for_write().as_uri()
    if sending_to != Connection(BENCH_REDIS_URL).as_uri():
        raise RuntimeError(f"this process would send its tasks to {sending_to}, its workers listen on "
                           f"{BENCH_REDIS_URL}")


@contextmanager
def services():
    """Embedded PostgreSQL (migrated), the bench's Redis database, a Dovecot; yields the env."""
    import redis

    base = Path(tempfile.mkdtemp(prefix="synedre-bench-"))
    r = redis.Redis.from_url(BENCH_REDIS_URL)
    pg = dovecot = None
    finished = False
    try:
        pg = stack.start_pg(base / "pg")
        dovecot = start_dovecot(base / "dovecot")
        env = {**os.environ, **stack.mailbox_env(dovecot, base), "SYNEDRE_DATABASE_URL": pg.get_uri(),
               "SYNEDRE_BROKER_URL": BENCH_REDIS_URL, "SYNEDRE_STATE_DIR": str(base / "state"),
               "SYNEDRE_DKIM_KEYS_FILE": str(CORPUS / "dkim-keys.json"), "SYNEDRE_LOG_LEVEL": "INFO",
               # the founder's OK is not what a bench times: no approval rule
               "SYNEDRE_APPROVAL_POLICY_FILE": str(stack.ROOT / "tests" / "approval-policy.off.toml")}
        os.environ.update(env)
        from synedre.config import get_settings
        from synedre.db.migrate import upgrade
        from synedre.log import configure

        configure("console", "WARNING")  # the benchmark's own output stays readable

        _use_bench_broker()
        upgrade(get_settings().migrations_dir, pg.get_uri())
        r.flushdb()
        logs = base / "logs"
        logs.mkdir()
        yield {"env": env, "dovecot": dovecot, "pg_url": pg.get_uri(), "logs": logs, "redis": r,
               "broker_url": BENCH_REDIS_URL}
        finished = True
    finally:
        if dovecot is not None:
            dovecot.stop()
        if pg is not None:
            pg.cleanup()
        r.flushdb()
        if finished:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"bench: the run's logs and data are kept in {base}", file=sys.stderr)
