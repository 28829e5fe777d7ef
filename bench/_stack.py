"""Start the real services a benchmark needs, in one temporary directory."""
from __future__ import annotations

import os
import re
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.services import stack  # noqa: E402
from tests.services.dovecot import start_dovecot  # noqa: E402

CORPUS = stack.CORPUS


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


@contextmanager
def services():
    """Embedded PostgreSQL (migrated), a Redis test database, a Dovecot; yields the env."""
    import redis

    base = Path(tempfile.mkdtemp(prefix="synedre-bench-"))
    pg = stack.start_pg(base / "pg")
    dovecot = start_dovecot(base / "dovecot")
    env = {**os.environ, **stack.mailbox_env(dovecot, base), "SYNEDRE_DATABASE_URL": pg.get_uri(),
           "SYNEDRE_BROKER_URL": stack.TEST_REDIS_URL, "SYNEDRE_STATE_DIR": str(base / "state"),
           "SYNEDRE_DKIM_KEYS_FILE": str(CORPUS / "dkim-keys.json"), "SYNEDRE_LOG_LEVEL": "INFO"}
    os.environ.update(env)
    from synedre.config import get_settings
    from synedre.db.migrate import upgrade
    from synedre.log import configure

    configure("console", "WARNING")  # the benchmark's own output stays readable

    get_settings.cache_clear()
    upgrade(get_settings().migrations_dir, pg.get_uri())
    r = redis.Redis.from_url(stack.TEST_REDIS_URL)
    r.flushdb()
    logs = base / "logs"
    logs.mkdir()
    try:
        yield {"env": env, "dovecot": dovecot, "pg_url": pg.get_uri(), "logs": logs, "redis": r}
    finally:
        dovecot.stop()
        pg.cleanup()
        r.flushdb()
