"""Fixtures that start the real services: embedded PostgreSQL + pgvector, Redis, Dovecot."""
from __future__ import annotations

import os

import pytest

from tests.services import stack
from tests.services.dovecot import start_dovecot

CORPUS = stack.CORPUS
# A pytest-xdist worker sets COLUMNS/LINES for its own report: the CLI's children would take
# them for an 80-column terminal and wrap what a pipe gets whole.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
# Tests never touch the default Redis database a developer's fleet uses.
os.environ["SYNEDRE_BROKER_URL"] = stack.TEST_REDIS_URL
os.environ.setdefault("SYNEDRE_LOG_LEVEL", "INFO")
# No approval rule unless a test sets one (tests/approvals/): the shipped policy holds launches.
os.environ.setdefault("SYNEDRE_APPROVAL_POLICY_FILE", str(stack.ROOT / "tests" / "approval-policy.off.toml"))


# Fixtures that start a real service, or a real program against one. `item.fixturenames`
# is the transitive closure of a test's fixtures, so one built on these (a module's
# `inbox` over `db`, `address` over clamd) makes its tests integration as well.
SERVICE_FIXTURES = frozenset({
    "pg_url", "db", "redis_db", "dovecot", "services", "clamd", "case_llm", "pipeline",
    "fresh_url",    # tests/db/test_migrations.py: a PostgreSQL of its own
    "api_factory",  # tests/spawn/test_runner.py: the real `claude` CLI against a scripted API
    "llm",          # tests/ai/test_facade.py: the provider SDKs against a local LLM server, as case_llm
})
# Modules whose every test runs a real program without one of those fixtures, kept in
# this list because their files belong to other work in progress.
INTEGRATION_MODULES = frozenset({
    "tests/spawn/test_claude_cli_offline.py",  # the pinned `claude` CLI under a pty
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test is `unit` or `integration`, so `pytest -m unit` needs no services. The longest
    files run first (those with a slow test, then those with services), unit files last: the
    xdist workers take files in this order, so the run does not end on one long file while
    the others idle."""
    weight: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if not (item.get_closest_marker("integration") or item.get_closest_marker("unit")):  # the file said so
            integration = module in INTEGRATION_MODULES or SERVICE_FIXTURES.intersection(
                getattr(item, "fixturenames", ()))
            item.add_marker(pytest.mark.integration if integration else pytest.mark.unit)
        mine = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("integration") else 2
        weight[module] = min(weight.get(module, 2), mine)
    items.sort(key=lambda item: weight[item.nodeid.split("::", 1)[0]])  # stable: each file's order kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Under CI=true (`.ci/run`) nothing is skipped in silence: a test that would skip for a
    missing tool (claude, Chromium, bwrap, root, docker-compose) fails, saying which."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"would skip, and CI=true tests everything: {reason}"


def _reset_settings() -> None:
    from synedre import kv
    from synedre.config import get_settings

    get_settings.cache_clear()
    kv.client.cache_clear()


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory) -> str:
    # The mutation run (scripts/mutation) starts one server for its thousands of short
    # pytest sessions instead of one per session; the tests still truncate what they use.
    shared = os.environ.get("SYNEDRE_TEST_SHARED_PG_URL")
    server = None if shared else stack.start_pg(tmp_path_factory.mktemp("pg") / "data")
    url = shared or server.get_uri()
    os.environ["SYNEDRE_DATABASE_URL"] = url
    _reset_settings()
    from synedre.config import get_settings
    from synedre.db.migrate import upgrade

    upgrade(get_settings().migrations_dir, url)
    yield url
    if server is not None:
        server.cleanup()


MESSAGE_TABLES = "audit_log, attachments, email_states, negotiations, advices, reply_drafts, " \
                 "launch_events, launches, runs, questions, raw_messages, " \
                 "founder, client_persons, tenant_topology, doctrines, chantiers, clients, " \
                 "agent_ask_events, agent_asks, incidents"


# The tables MESSAGE_TABLES reach through foreign keys (what `TRUNCATE ... CASCADE` would
# empty), and the sequences they own: found once per session.
_REACH = """WITH RECURSIVE reach(oid) AS (
  SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = 'synedre' AND c.relname = ANY(%s)
  UNION SELECT con.conrelid FROM pg_constraint con JOIN reach r ON con.confrelid = r.oid WHERE con.contype = 'f')
SELECT r.oid::regclass::text, array_remove(array_agg(d.objid::regclass::text), NULL) FROM reach r
  LEFT JOIN pg_depend d ON d.refobjid = r.oid AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
   AND (SELECT relkind FROM pg_class WHERE oid = d.objid) = 'S'
 GROUP BY r.oid"""
_emptied: dict[str, tuple[str, str]] = {}


def empty_message_tables(conn) -> None:
    """What `TRUNCATE <MESSAGE_TABLES> RESTART IDENTITY CASCADE` does, in a few milliseconds
    instead of ~130 (a TRUNCATE makes new files for every table it reaches, a test at a time):
    the rows of the tables that hold any deleted with the foreign keys' triggers off, every
    sequence of those tables restarted."""
    key = conn.info.dsn
    if key not in _emptied:
        found = conn.execute(_REACH, ([t.strip() for t in MESSAGE_TABLES.split(",")],)).fetchall()
        holding = " UNION ALL ".join(f"(SELECT '{t}' WHERE EXISTS (SELECT 1 FROM {t}))" for t, _ in found)
        restart = "; ".join(f"ALTER SEQUENCE {s} RESTART" for _, seqs in found for s in seqs)
        _emptied[key] = (holding, restart)
    holding, restart = _emptied[key]
    full = [t for (t,) in conn.execute(holding).fetchall()]
    with conn.transaction():
        if full:
            conn.execute("SET LOCAL session_replication_role = replica")
            for t in full:
                conn.execute(f"DELETE FROM {t}")
        conn.execute(restart)


@pytest.fixture
def db(pg_url, tmp_path, monkeypatch):
    """A database with the schema and seeds but no messages nor directory; settings point at it."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        empty_message_tables(conn)
    monkeypatch.setenv("SYNEDRE_STATE_DIR", str(tmp_path / "state"))
    _reset_settings()
    yield pg_url
    _reset_settings()


@pytest.fixture
def redis_db():
    import redis

    r = redis.Redis.from_url(stack.TEST_REDIS_URL)
    r.flushdb()
    yield r
    r.flushdb()


def running(server):
    """A started service, for a fixture to yield from: stopped at teardown."""
    yield server
    server.stop()


@pytest.fixture
def dovecot(tmp_path):
    yield from running(start_dovecot(tmp_path / "dovecot"))


@pytest.fixture
def services(db, redis_db, dovecot, tmp_path, monkeypatch):
    """Everything ingestion needs, and the environment a child process must get."""
    env = {**stack.mailbox_env(dovecot, tmp_path), "SYNEDRE_DKIM_KEYS_FILE": str(CORPUS / "dkim-keys.json")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _reset_settings()
    logs = tmp_path / "logs"
    logs.mkdir()
    return {"env": dict(os.environ), "dovecot": dovecot, "redis": redis_db, "logs": logs,
            "db": db}


@pytest.fixture
def clamd(tmp_path):
    from tests.services.clamd import start_clamd

    yield from running(start_clamd(tmp_path / "clamd"))


@pytest.fixture
def case_llm():
    """A local server speaking the Mistral API, answering from cases.json."""
    from tests.services.llm_server import start_llm_server
    from tests.services.scripted_classifier import CaseScript

    script = CaseScript(CORPUS / "cases.json")
    server = start_llm_server(script)
    server.script = script
    yield server
    server.stop()


@pytest.fixture
def pipeline(services, clamd, case_llm, monkeypatch):
    """The whole understanding pipeline on real workers: poll, scan+ocr, classify+materialize."""
    env = {"SYNEDRE_CLAMD": str(clamd.socket_path), "SYNEDRE_MISTRAL_API_KEY": "test-key-not-secret",
           "SYNEDRE_MISTRAL_SERVER_URL": case_llm.url}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _reset_settings()
    env = {**services["env"], **env}
    import subprocess
    import sys
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import",
                    str(CORPUS / "directory.json")], env=env, check=True, timeout=60, cwd=stack.ROOT,
                   capture_output=True)
    logs = services["logs"]
    workers = []
    try:
        workers += stack.celery_workers({**env, "SYNEDRE_DB_POOL_MAX": "10"}, logs, ("poll", 2), ("scan,ocr", 2),
                                        ("classify,materialize", 8, "threads"))
        yield {**services, "env": env, "clamd": clamd, "llm": case_llm, "workers": workers}
    finally:
        stack.stop_all(workers)


def oauth_registry(dovecot, smtp, oauth, secrets, *, refresh_env: str | None = None) -> str:
    """The registry's `atlas` on `dovecot` (IMAP) and `smtp`, logging in with OAuth2 against the
    scripted `oauth` server (provider "custom"), its client secret and refresh token in `secrets`."""
    where = f'refresh_token_env = "{refresh_env}"' if refresh_env else \
        f'refresh_token_file = "{secrets / "atlas.refresh-token"}"'
    return (f'[mailboxes.atlas]\nimap_host = "{dovecot.host}"\nimap_port = {dovecot.port}\nimap_tls = false\n'
            f'smtp_host = "{smtp.host}"\nsmtp_port = {smtp.port}\nsmtp_tls = false\n'
            f'username = "atlas"\nauth = "oauth2"\nfolder = "INBOX"\n'
            f'[mailboxes.atlas.oauth2]\nprovider = "custom"\nclient_id = "{oauth.client_id}"\n'
            f'client_secret_file = "{secrets / "client-secret"}"\n{where}\n'
            f'token_url = "{oauth.url}/token"\nauthorization_url = "{oauth.url}/authorize"\n'
            f'device_authorization_url = "{oauth.url}/device"\nscopes = ["mail"]\n')


@pytest.fixture
def oauth_box(db, redis_db, tmp_path, monkeypatch):
    """A scripted OAuth server (tests/services/oauth.py), a Dovecot whose oauth2 passdb and an
    aiosmtpd whose XOAUTH2 ask it about every token, and the registry's `atlas` logging in with
    OAuth2: its client secret and refresh token in 0600 files."""
    from tests.services.oauth import start_oauth
    from tests.services.smtp import start_smtp

    oauth = start_oauth(user="atlas")
    dovecot = start_dovecot(tmp_path / "dovecot", oauth2_introspection_url=f"{oauth.url}/introspect")
    smtp = start_smtp(bearer=f"{oauth.url}/introspect")
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    for name, value in (("client-secret", oauth.client_secret), ("atlas.refresh-token", oauth.new_refresh_token())):
        (secrets / name).write_text(value + "\n")
        (secrets / name).chmod(0o600)
    path = tmp_path / "mailboxes.toml"
    path.write_text(oauth_registry(dovecot, smtp, oauth, secrets))
    env = {"SYNEDRE_MAILBOXES_FILE": str(path), "SYNEDRE_DKIM_KEYS_FILE": str(CORPUS / "dkim-keys.json"),
           "SYNEDRE_POLL_INTERVAL_S": "3600",  # beat's safety net out of the way: IDLE alone brings mail in
           "SYNEDRE_LLM_RETRIES": "0", "PYTHONUNBUFFERED": "1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SYNEDRE_MISTRAL_API_KEY", raising=False)
    _reset_settings()
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        yield {"oauth": oauth, "dovecot": dovecot, "smtp": smtp, "env": dict(os.environ), "logs": logs, "db": db,
               "secrets": secrets, "registry": path, "tmp": tmp_path}
    finally:
        smtp.stop()
        dovecot.stop()
        oauth.stop()


def rebuild_pool(monkeypatch, size: int):
    """The process's pool, closed and rebuilt on next use with `size` connections at most;
    returns the cleanup that closes it again."""
    from synedre import db as database
    from synedre.config import get_settings

    monkeypatch.setenv("SYNEDRE_DB_POOL_MAX", str(size))
    get_settings.cache_clear()

    def close() -> None:
        if database._pool is not None:
            database._pool.close()
        database._pool = None
    close()
    return close
