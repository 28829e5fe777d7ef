"""compose/ stays true of the code: one service per worker group of the pipeline table, on
that group's queues, every setting in the env file and no secret in it."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
import yaml

from synedre.celeryconfig import GROUPS
from synedre.config import Settings
from synedre.fleet import worker_env
from synedre.pipeline import WORKER_GROUPS, group_queues
from tests.services import stack

COMPOSE = stack.ROOT / "compose"
SPEC = yaml.safe_load((COMPOSE / "compose.yaml").read_text())
SERVICES: dict[str, dict] = SPEC["services"]
ENV_EXAMPLE = (COMPOSE / "synedre.env.example").read_text()
# Read by compose/entrypoint.sh, not by Settings: the password files it puts into the URLs.
ENTRYPOINT_VARIABLES = {"SYNEDRE_DATABASE_PASSWORD_FILE", "SYNEDRE_BROKER_PASSWORD_FILE", "SYNEDRE_SECRET_ENV_DIR"}


def _argv(service: dict) -> list[str]:
    command = service.get("command") or []
    return command if isinstance(command, list) else command.split()


def _option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _workers() -> dict[str, list[str]]:
    return {name: argv for name, s in SERVICES.items()
            if (argv := _argv(s))[:4] == ["python", "-m", "tasks", "worker"]}


def _env_lines() -> dict[str, str]:
    """KEY=VALUE lines that are set (not commented out)."""
    return dict(line.split("=", 1) for line in ENV_EXAMPLE.splitlines()
                if line.strip() and not line.lstrip().startswith("#"))


def _setting_names() -> list[str]:
    return [str(f.validation_alias or f"SYNEDRE_{name.upper()}") for name, f in Settings.model_fields.items()]


def test_worker_services_are_the_pipeline_worker_groups():
    assert sorted(_workers()) == sorted(WORKER_GROUPS)


@pytest.mark.parametrize("group", list(WORKER_GROUPS))
def test_each_worker_service_runs_its_group_queues_concurrency_and_pool(group):
    service, argv, g = SERVICES[group], _workers()[group], WORKER_GROUPS[group]
    assert _option(argv, "-Q").split(",") == group_queues(group)
    assert int(_option(argv, "-c")) == g.concurrency
    assert _option(argv, "-P") == g.pool
    assert _option(argv, "-n") == f"{group}@%h"  # unique per container: its hostname
    # the fleet's extra processes of a group are replicas here (`--scale` overrides them)
    assert service.get("deploy", {}).get("replicas", 1) == g.processes
    environment = service.get("environment") or {}
    assert {k: v for k, v in environment.items() if k in worker_env(GROUPS[group])} == worker_env(GROUPS[group])
    assert f"-d {group}@$$HOSTNAME" in service["healthcheck"]["test"][-1]


def test_redis_never_evicts_and_keeps_an_append_only_file():
    command = " ".join(_argv(SERVICES["redis"]))
    assert "--maxmemory-policy noeviction" in command
    assert "--appendonly yes" in command
    assert "requirepass" not in command  # the password is an ACL file made from the secret


def test_postgres_is_the_official_pgvector_image():
    assert SERVICES["postgres"]["image"].startswith("pgvector/pgvector:pg16")


def test_every_synedre_service_waits_for_the_one_shot_migration():
    migrate = SERVICES["migrate"]
    assert _argv(migrate) == ["synedre", "db", "upgrade"] and migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    synedre = [n for n, s in SERVICES.items() if s.get("image", "").startswith("synedre") and n != "migrate"]
    assert set(_workers()) | {"beat", "idle", "flower"} <= set(synedre)
    for name in synedre:
        assert SERVICES[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name


def test_beat_idle_and_flower_run_what_the_fleet_runs():
    assert _argv(SERVICES["beat"])[:4] == ["python", "-m", "tasks", "beat"]
    assert _option(_argv(SERVICES["beat"]), "-S") == "redbeat.RedBeatScheduler"
    assert _argv(SERVICES["idle"]) == ["synedre", "idle"]
    assert _argv(SERVICES["flower"]) == ["synedre", "flower"]


def test_flower_is_published_on_the_hosts_loopback_only_with_its_credentials_as_a_secret():
    flower = SERVICES["flower"]
    assert flower["ports"] and all(p.startswith("127.0.0.1:") for p in flower["ports"])
    assert "flower_auth" in flower["secrets"]
    assert not [n for n, s in SERVICES.items() if n != "flower" and "flower_auth" in s.get("secrets", [])]
    assert _env_lines()["SYNEDRE_FLOWER_AUTH_FILE"] == "/run/secrets/flower_auth"


def test_long_running_services_have_healthchecks():
    # idle exits when it gives up and is restarted; clamd's healthcheck is its image's own
    expected = set(_workers()) | {"redis", "postgres", "beat", "flower"}
    assert {n for n, s in SERVICES.items() if "healthcheck" in s} >= expected


def test_the_env_example_lists_every_setting():
    missing = [n for n in _setting_names() if not re.search(rf"^#? ?{n}=", ENV_EXAMPLE, re.M)]
    assert missing == []


def test_the_env_example_sets_only_known_variables_with_valid_values(tmp_path):
    unknown = set(_env_lines()) - set(_setting_names()) - ENTRYPOINT_VARIABLES
    assert unknown == set()
    path = tmp_path / "synedre.env"
    path.write_text(ENV_EXAMPLE)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SYNEDRE_", "FLOWER_"))}
    out = subprocess.run([sys.executable, "-c", "import sys; from synedre.config import Settings; "
                          "s = Settings(_env_file=sys.argv[1]); print(s.database_url, s.clamd, s.flower_address)",
                          str(path)], env=clean, cwd=stack.ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["postgresql://synedre_app@postgres:5432/synedre", "clamd:3310", "0.0.0.0"]


def test_no_secret_value_in_the_compose_files():
    secretish = re.compile(r"PASSWORD|API_KEY|BASIC_AUTH|SECRET|TOKEN")
    for key, value in _env_lines().items():
        if secretish.search(key) and not key.endswith("_FILE"):
            assert value == "", key
        if "://" in value:
            assert urlsplit(value).password is None, key
    text = (COMPOSE / "compose.yaml").read_text()
    assert not re.search(r"://[^/\s@]*:[^/\s@]+@", text)  # no user:password@ in any URL
    for name, s in SERVICES.items():
        environment = s.get("environment") or {}
        assert not [k for k in environment if secretish.search(k) and not k.endswith("_FILE")], name


def test_the_image_installs_from_the_lock():
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    assert "pip install -r requirements.lock" in dockerfile
    assert "pip install --no-deps -e ." in dockerfile


def _entrypoint(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(COMPOSE / "entrypoint.sh"), *argv], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=30)


def test_the_entrypoint_completes_the_urls_with_the_password_files(tmp_path):
    (tmp_path / "db").write_text("0123abcd\n")
    (tmp_path / "redis").write_text("feedbeef")
    env = {"SYNEDRE_DATABASE_URL": "postgresql://synedre_app@postgres:5432/synedre",
           "SYNEDRE_DATABASE_PASSWORD_FILE": str(tmp_path / "db"),
           "SYNEDRE_BROKER_URL": "redis://redis:6379/0", "SYNEDRE_BROKER_PASSWORD_FILE": str(tmp_path / "redis")}
    out = _entrypoint(env, "sh", "-c",
                      'echo "$SYNEDRE_DATABASE_URL $SYNEDRE_BROKER_URL ${SYNEDRE_BROKER_PASSWORD_FILE-}"')
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["postgresql://synedre_app:0123abcd@postgres:5432/synedre",
                                  "redis://:feedbeef@redis:6379/0"]
    # a password that a URL would have to encode is refused, not mangled; nor is it quoted
    (tmp_path / "db").write_text("p@ss word")
    out = _entrypoint(env, "true")
    assert out.returncode == 2 and "p@ss" not in out.stderr
    assert "[A-Za-z0-9._~-]" in out.stderr


def test_the_entrypoint_exports_each_secret_env_file_as_its_variable(tmp_path):
    (tmp_path / "ATLAS_IMAP_PASSWORD").write_text("imap-pw\n")
    (tmp_path / "OTHER_BOX_PASSWORD").write_text("other pw")
    out = _entrypoint({"SYNEDRE_SECRET_ENV_DIR": str(tmp_path)}, "sh", "-c",
                      'echo "$ATLAS_IMAP_PASSWORD|$OTHER_BOX_PASSWORD|${SYNEDRE_SECRET_ENV_DIR-unset}"')
    assert out.returncode == 0, out.stderr
    assert out.stdout == "imap-pw|other pw|unset\n"
    (tmp_path / "not-a-name").write_text("x")
    assert _entrypoint({"SYNEDRE_SECRET_ENV_DIR": str(tmp_path)}, "true").returncode == 2


def _compose_client() -> list[str]:
    """A client that validates a compose file without a Docker engine: Debian's
    `docker-compose` package (installed by scripts/system-deps), or the Docker CLI's plugin."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    pytest.fail("no compose client: scripts/system-deps installs Debian's docker-compose")


def test_docker_compose_accepts_the_file(tmp_path):
    client = _compose_client()
    work = tmp_path / "compose"
    shutil.copytree(COMPOSE, work)
    shutil.copy(work / "synedre.env.example", work / "synedre.env")
    shutil.copy(stack.ROOT / "mailboxes.example.toml", work / "mailboxes.toml")
    for secret in SPEC["secrets"].values():
        path = work / secret["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("0123abcd\n")
    out = subprocess.run([*client, "-f", str(work / "compose.yaml"), "config", "--quiet"],
                         cwd=work, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
