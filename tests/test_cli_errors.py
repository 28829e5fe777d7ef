"""An operator never sees a traceback (issue 19): every command, with each broken dependency
and each invalid setting, says in one line what is wrong, naming the variable or the
dependency, and exits with the README's code (0 done, 1 failed, 2 usage or configuration,
3 a dependency down or not ready)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import psycopg
import pytest

from synedre.health.probe import PROBES_BOUND_S
from tests.services import stack
from tests.services._process import free_port

pytestmark = pytest.mark.timeout(300)

OK, FAILED, USAGE, DEPENDENCY = 0, 1, 2, 3
# Every command that ends on its own, with arguments, and what it needs: "state" (the
# embedded database where the state directory says), "pg" (a server that answers), "schema"
# (migrated), "redis". idle, flower, metrics and fleet run until stopped: tested below.
DATA = {"state", "pg", "schema"}
COMMANDS: dict[str, tuple[list[str], set[str]]] = {
    "status": (["status"], DATA | {"redis"}),
    "inspect --all": (["inspect", "--all"], DATA),
    "inspect": (["inspect", "1"], DATA),
    "retry": (["retry", "1", "--reason", "test"], DATA),
    "retry --status": (["retry", "--status", "classify_failed", "--reason", "test"], DATA),
    "launches": (["launches"], DATA),
    "launches --asks": (["launches", "--asks"], DATA),
    "tail": (["tail", "1", "--no-follow"], DATA),
    "locks": (["locks"], {"redis"}),
    "poll": (["poll", "atlas"], {"redis"}),
    "report calibration": (["report", "calibration"], DATA),
    "spawn pause": (["spawn", "pause", "--reason", "test"], {"redis"}),
    "spawn status": (["spawn", "status"], {"redis"}),
    "spawn resume": (["spawn", "resume"], DATA | {"redis"}),
    "launch resume": (["launch", "resume", "1"], DATA),  # no message 1: refused before Redis
    "agents": (["agents"], DATA),
    "agent ask": (["agent", "ask", "nobody", "a question"], DATA),
    "directory import": (["directory", "import", str(stack.ROOT / "directory.example.json")], DATA),
    "directory show": (["directory", "show"], DATA),
    "directory mockup": (["directory", "mockup", "nochantier", "/", "IMAGE"], DATA),
    "db status": (["db", "status"], {"state", "pg"}),
    "db url": (["db", "url"], {"state"}),
    "db stop": (["db", "stop"], set()),
    "db upgrade": (["db", "upgrade"], {"pg"}),  # last: it migrates the unmigrated database
}

# Each invocation in-process through typer's runner, one process per case (the settings and
# pools of a process are the case's): what each printed, its exit code, and any exception
# that escaped the CLI's error path.
RUN_ALL = """
import json, sys
from typer.testing import CliRunner
from synedre.cli import app
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    r = CliRunner().invoke(app, argv)
    escaped = r.exception if r.exception is not None and not isinstance(r.exception, SystemExit) else None
    out[name] = {"code": r.exit_code, "out": r.stdout + r.stderr, "escaped": repr(escaped) if escaped else None}
print(json.dumps(out))
"""


def run_all(env: dict[str, str], names: list[str], image) -> dict[str, dict]:
    argvs = {n: [str(image) if a == "IMAGE" else a for a in COMMANDS[n][0]] for n in names}
    out = subprocess.run([sys.executable, "-c", RUN_ALL, json.dumps(argvs)], env=env, cwd=stack.ROOT,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture
def base_env(db, redis_db, tmp_path):
    """Working settings (the test database, Redis database 13, a mailbox registry), an image."""
    from PIL import Image

    image = tmp_path / "mockup.png"
    Image.new("RGB", (8, 8), "white").save(image)
    registry = tmp_path / "mailboxes.toml"
    registry.write_text(f'[mailboxes.atlas]\nimap_host = "127.0.0.1"\nimap_port = {free_port()}\nimap_tls = false\n'
                        'smtp_host = "127.0.0.1"\nsmtp_port = 25\nsmtp_tls = false\nusername = "atlas"\n'
                        'password_env = "TEST_ATLAS_PASSWORD"\nfolder = "INBOX"\n')
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(SYNEDRE_MAILBOXES_FILE=str(registry), TEST_ATLAS_PASSWORD="x", SYNEDRE_DB_TIMEOUT_S="2",
               SYNEDRE_CLAMD=str(tmp_path / "no-clamd.sock"))
    return {"env": env, "image": image, "tmp": tmp_path, "db": db}


def unmigrated_url(pg_url: str) -> str:
    """A database of its own on the test server, with no schema."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS unmigrated")
        conn.execute("CREATE DATABASE unmigrated")
    return pg_url.replace("/postgres?", "/unmigrated?")


def broken(case: str, base: dict) -> tuple[dict[str, str], set[str], str, str]:
    """(environment, what it breaks, the words that name it, the line `status` says it in)."""
    env = dict(base["env"])
    if case == "no database":
        env["SYNEDRE_DATABASE_URL"] = f"postgresql://synedre@127.0.0.1:{free_port()}/synedre"
        return env, {"pg", "schema"}, "PostgreSQL (127.0.0.1:", "FAIL postgresql: OperationalError"
    if case == "no database in the state directory":
        env.pop("SYNEDRE_DATABASE_URL")
        env["SYNEDRE_STATE_DIR"] = str(base["tmp"] / "elsewhere")
        named = "`synedre db upgrade` creates it"
        return env, DATA, named, f"FAIL postgresql: no database in {base['tmp'] / 'elsewhere' / 'pgdata'}"
    if case == "unmigrated database":
        env["SYNEDRE_DATABASE_URL"] = unmigrated_url(base["db"])
        return env, {"schema"}, "run `synedre db upgrade`", "pending: run `synedre db upgrade`"
    assert case == "no redis"
    env["SYNEDRE_BROKER_URL"] = f"redis://127.0.0.1:{free_port()}/13"
    return env, {"redis"}, "Redis (127.0.0.1:", "FAIL redis: ConnectionError"


def assert_one_clear_line(result: dict, name: str) -> None:
    assert result["escaped"] is None, (name, result)
    assert "Traceback" not in result["out"] and "File \"" not in result["out"], (name, result["out"])
    errors = [line for line in result["out"].splitlines() if line.startswith("error:")]
    assert len(errors) <= 1, (name, result["out"])


@pytest.mark.slow
@pytest.mark.parametrize("case", ["no database", "no database in the state directory", "unmigrated database",
                                  "no redis"])
def test_every_command_with_a_broken_dependency_says_which_in_one_line_and_exits_3(base_env, case):
    env, breaks, named, in_status = broken(case, base_env)
    names = [n for n in COMMANDS if not (case == "no database in the state directory" and n == "db upgrade")
             and not (breaks == {"redis"} and n == "agent ask")]  # a working ask would pay an LLM call
    results = run_all(env, names, base_env["image"])
    for name in names:
        r = results[name]
        assert_one_clear_line(r, name)
        if name == "db upgrade" and case == "unmigrated database":
            assert r["code"] == OK and "applied:" in r["out"], r  # the remedy works
        elif breaks & COMMANDS[name][1]:
            assert r["code"] == DEPENDENCY and (in_status if name == "status" else named) in r["out"], (name, r)
        else:  # it does not need what is broken: it runs (a refusal of its own is 1 or 2)
            assert r["code"] in (OK, FAILED, USAGE) and named not in r["out"], (name, r)
    if case == "no database in the state directory":  # nothing created where it looked
        assert not (base_env["tmp"] / "elsewhere" / "pgdata").exists()


INVALID = [  # variable, value, what the line must say
    ("SYNEDRE_POLL_INTERVAL_S", "abc", "SYNEDRE_POLL_INTERVAL_S='abc': input should be a valid number"),
    ("SYNEDRE_LOG_LEVEL", "LOUD", "SYNEDRE_LOG_LEVEL='LOUD': input should be 'DEBUG', 'INFO'"),
    ("SYNEDRE_LOG_FORMAT", "xml", "SYNEDRE_LOG_FORMAT='xml': input should be 'console' or 'json'"),
    ("SYNEDRE_MAX_CONCURRENT_LAUNCHES", "-1", "SYNEDRE_MAX_CONCURRENT_LAUNCHES='-1': input should be greater"),
    ("SYNEDRE_AGENT_TOOLS", "Bash,Bogus", "SYNEDRE_AGENT_TOOLS='Bash,Bogus': may only remove tools"),
    ("SYNEDRE_DATABASE_URL", "nonsense", "SYNEDRE_DATABASE_URL: not a PostgreSQL URL"),
    ("SYNEDRE_BROKER_URL", "http://127.0.0.1:6379/13", "SYNEDRE_BROKER_URL: not a Redis URL"),
    ("SYNEDRE_ISO_THRESHOLD", "1.5", "SYNEDRE_ISO_THRESHOLD='1.5': input should be less than or equal to 1"),
    ("SYNEDRE_SPAWN_DISABLED", "maybe", "SYNEDRE_SPAWN_DISABLED='maybe': input should be a valid boolean"),
    ("SYNEDRE_FLOWER_PORT", "70000", "SYNEDRE_FLOWER_PORT='70000': input should be less than or equal to 65535"),
    ("SYNEDRE_OCR_LANGUAGES", "fra eng", "SYNEDRE_OCR_LANGUAGES='fra eng': language codes of Tesseract"),
    ("SYNEDRE_DAILY_SPEND_CAP_USD", "-5", "SYNEDRE_DAILY_SPEND_CAP_USD='-5': input should be greater than or equal"),
]


@pytest.mark.slow
def test_every_command_with_each_invalid_setting_names_the_variable_and_exits_2(base_env):
    for variable, value, said in INVALID:
        results = run_all({**base_env["env"], variable: value}, list(COMMANDS), base_env["image"])
        for name, r in results.items():
            assert_one_clear_line(r, name)
            assert r["code"] == USAGE and said in r["out"], (variable, name, r)


def test_a_bad_setting_through_the_real_entry_point_is_one_line_without_traceback(tmp_path):
    env = {**os.environ, "SYNEDRE_POLL_INTERVAL_S": "abc", "SYNEDRE_MISTRAL_API_KEY": "sk-secret-value-1234",
           "SYNEDRE_DATABASE_URL": "mysql://user:pw-secret@host/db"}
    out = subprocess.run([str(stack.ROOT / ".venv" / "bin" / "synedre"), "status"], env=env, capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == USAGE and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "SYNEDRE_POLL_INTERVAL_S='abc'" in out.stderr and "SYNEDRE_DATABASE_URL: not a PostgreSQL URL" in out.stderr
    assert "pw-secret" not in out.stderr  # a URL's value is never shown: it may carry a password
    verbose = subprocess.run([str(stack.ROOT / ".venv" / "bin" / "synedre"), "--verbose", "status"], env=env,
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert verbose.returncode == USAGE and "Traceback" in verbose.stderr  # asked for


def test_a_url_its_library_cannot_parse_is_a_configuration_error_that_never_shows_the_password(base_env):
    # libpq's and urllib's own messages quote the URL or its part ("invalid percent-encoded
    # token: \"p%zz…\""): refused when the settings load, in words of our own, exit 2
    for variable, url in (("SYNEDRE_DATABASE_URL", "postgresql://u:p%zzpw-secret-1@127.0.0.1/db"),
                          ("SYNEDRE_DATABASE_URL", "postgresql://u:pw-secret-1@[::1/db"),
                          ("SYNEDRE_BROKER_URL", "redis://:pw-secret-1@127.0.0.1:abc/13"),
                          ("SYNEDRE_BROKER_URL", "redis://:pw-secret-1@[::1/13")):
        for argv in (["inspect", "--all"], ["locks"]):
            out = subprocess.run([sys.executable, "-m", "synedre.cli", *argv], env={**base_env["env"], variable: url},
                                 capture_output=True, text=True, timeout=60, cwd=stack.ROOT)
            assert out.returncode == USAGE, (url, argv, out.stderr)
            assert out.stderr.startswith(f"error: configuration: {variable}: not a "), (url, out.stderr)
            assert out.stderr.count("\n") == 1 and "pw-secret-1" not in out.stderr, (url, out.stderr)


def test_an_error_line_never_shows_a_configured_secret(monkeypatch):
    from synedre.cli import common
    from synedre.config import get_settings

    monkeypatch.setenv("SYNEDRE_DATABASE_URL", "postgresql://u:pw-secret-1@127.0.0.1:1/db")
    monkeypatch.setenv("SYNEDRE_MISTRAL_API_KEY", "key-secret-2")
    get_settings.cache_clear()
    try:
        line = common.scrub('auth failed: "pw-secret-1" with key-secret-2 at 127.0.0.1:1')
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert "pw-secret-1" not in line and "key-secret-2" not in line and "at 127.0.0.1:1" in line, line


def test_a_bad_broker_url_that_parses_fails_every_redis_command_with_exit_3(base_env):
    env = {**base_env["env"], "SYNEDRE_BROKER_URL": f"redis://:wrong-password@127.0.0.1:{free_port()}/13"}
    for argv in (["spawn", "status"], ["locks"], ["poll", "atlas"]):
        out = subprocess.run([sys.executable, "-m", "synedre.cli", *argv], env=env, capture_output=True, text=True,
                             timeout=60, cwd=stack.ROOT)
        assert out.returncode == DEPENDENCY, out.stderr
        assert out.stderr.startswith("error: Redis (127.0.0.1:") and "SYNEDRE_BROKER_URL" in out.stderr
        assert "Traceback" not in out.stderr and "wrong-password" not in out.stderr


def test_fleet_with_redis_down_and_metrics_without_a_database_stop_in_one_line(base_env):
    env = {**base_env["env"], "SYNEDRE_BROKER_URL": f"redis://127.0.0.1:{free_port()}/13"}
    fleet = subprocess.run([sys.executable, "-m", "synedre.cli", "fleet"], env=env, capture_output=True, text=True,
                           timeout=60, cwd=stack.ROOT)
    assert fleet.returncode == DEPENDENCY and fleet.stderr.startswith("error: Redis"), fleet.stderr
    env = {k: v for k, v in base_env["env"].items() if k != "SYNEDRE_DATABASE_URL"}
    metrics = subprocess.run([sys.executable, "-m", "synedre.cli", "metrics", "--port", str(free_port())],
                             env={**env, "SYNEDRE_STATE_DIR": str(base_env["tmp"] / "none")}, capture_output=True,
                             text=True, timeout=60, cwd=stack.ROOT)
    assert metrics.returncode == DEPENDENCY and "`synedre db upgrade` creates it" in metrics.stderr


def test_poll_wait_with_imap_down_names_the_mailbox_and_where(base_env):
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "poll", "atlas", "--wait"], env=base_env["env"],
                         capture_output=True, text=True, timeout=120, cwd=stack.ROOT)
    assert out.returncode == DEPENDENCY, out.stderr
    assert out.stderr.startswith("error: IMAP of mailbox atlas (127.0.0.1:") and "SYNEDRE_MAILBOXES_FILE" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_status_exits_non_zero_within_the_probes_bound_with_postgresql_down(base_env):
    # a server that accepts and never answers: every probe waits, the bound stops them
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        for url in (f"postgresql://synedre@127.0.0.1:{free_port()}/synedre",  # refused
                    f"postgresql://synedre@127.0.0.1:{silent.getsockname()[1]}/synedre"):  # silent
            env = {**base_env["env"], "SYNEDRE_DATABASE_URL": url, "SYNEDRE_DB_TIMEOUT_S": "30"}
            # the probes' bound past the command's start (seconds on a loaded machine), give or take 3 s
            bound = stack.status_start_s(env) + PROBES_BOUND_S + 3
            started = time.monotonic()
            out = subprocess.run([sys.executable, "-m", "synedre.cli", "status"], env=env, capture_output=True,
                                 text=True, timeout=60, cwd=stack.ROOT)
            took = time.monotonic() - started
            assert out.returncode == DEPENDENCY and took < bound, (took, bound, out.stdout, out.stderr)
            assert "FAIL postgresql:" in out.stdout and "Traceback" not in out.stdout + out.stderr
    finally:
        silent.close()


def test_status_tells_warnings_from_failures_and_lists_only_features_in_use(base_env, monkeypatch):
    from synedre import health

    checks = [health.Check("redis", False, "reachable; WARNING no persistence"), health.Check("clamd", False, "x"),
              health.Check("postgresql", True, "reachable")]
    assert [c.level for c in checks] == ["warning", "fail", "ok"]
    env = {**base_env["env"], "SYNEDRE_MISTRAL_API_KEY": "k"}
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "status"], env=env, capture_output=True, text=True,
                         timeout=60, cwd=stack.ROOT)
    features = set(re.findall(r"^\w+ llm:(\w+):", out.stdout, re.M))
    assert features == {"agent_ask", "atlas_classifier", "atlas_classifier_vision", "atlas_draft_reply",
                        "lessons_embedding", "lessons_summary"}
    assert "WARN redis:" in out.stdout or "ok redis:" in out.stdout  # never FAIL for a warning
    assert "FAIL clamd:" in out.stdout and "SYNEDRE_CLAMD" in out.stdout and out.returncode == DEPENDENCY
