"""`synedre status` calls each configured LLM provider and the agent's API for real (issue 27):
a refused key or a misspelt server URL is a FAIL naming that provider, exit 3, within the
probes' bound, where it used to say `ok llm:…: served by mistral` without calling anyone."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from synedre.cli.common import DEPENDENCY, OK
from synedre.health.probe import PROBES_BOUND_S
from tests.services import stack
from tests.services.claude_api import ScriptedModel, start_claude_api
from tests.services.llm_server import HTTPError, start_llm_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def configured(services, clamd):
    """Everything `synedre status` checks, up: a Mistral and an Anthropic API that accept any key."""
    mistral, agent_api = start_llm_server(), start_claude_api(ScriptedModel([]))
    env = {**services["env"], "SYNEDRE_CLAMD": str(clamd.socket_path),
           "SYNEDRE_MISTRAL_API_KEY": "a-key", "SYNEDRE_MISTRAL_SERVER_URL": mistral.url,
           "SYNEDRE_ANTHROPIC_API_KEY": "a-key", "SYNEDRE_ANTHROPIC_BASE_URL": agent_api.url}
    yield env, mistral
    mistral.stop()
    agent_api.stop()


def status(env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    """Its output, and how long it took past its start (measured just before, the load as it is)."""
    start = stack.status_start_s(env)
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "status"], env=env, cwd=stack.ROOT,
                         capture_output=True, text=True, timeout=60)
    return out, time.monotonic() - started - start


def line(out: subprocess.CompletedProcess, name: str) -> str:
    return next(row for row in out.stdout.splitlines() if row.split()[1:2] == [f"{name}:"])


def test_a_refused_key_and_a_misspelt_url_fail_the_provider_they_belong_to(configured):
    env, mistral = configured
    out, _ = status(env)
    assert out.returncode == OK, out.stdout  # everything up: whatever fails below is the provider
    assert line(out, "api:mistral").startswith(f"ok api:mistral: {mistral.url} accepts the key")
    assert line(out, "api:anthropic").startswith("ok api:anthropic:")

    refusing = start_llm_server(lambda body, path: HTTPError(401, "Unauthorized"))
    try:
        out, took = status({**env, "SYNEDRE_MISTRAL_SERVER_URL": refusing.url})
    finally:
        refusing.stop()
    assert out.returncode == DEPENDENCY and took < PROBES_BOUND_S, (took, out.stdout)
    assert line(out, "api:mistral") == (f"FAIL api:mistral: the key is refused (HTTP 401) at {refusing.url}:"
                                        " check SYNEDRE_MISTRAL_API_KEY")
    assert [r.split()[1] for r in out.stdout.splitlines() if r.startswith("FAIL")] == ["api:mistral:"]

    # the SDK adds /v1 itself: a URL given with it reaches /v1/v1/models
    out, took = status({**env, "SYNEDRE_MISTRAL_SERVER_URL": mistral.url + "/v1"})
    assert out.returncode == DEPENDENCY and took < PROBES_BOUND_S, (took, out.stdout)
    assert line(out, "api:mistral").startswith(f"FAIL api:mistral: no such API at {mistral.url}/v1 (HTTP 404")
    assert "SYNEDRE_MISTRAL_SERVER_URL, the server's root, without /v1" in line(out, "api:mistral")

    # a host misspelt: nothing answers there
    out, took = status({**env, "SYNEDRE_MISTRAL_SERVER_URL": "http://127.0.0.1:9"})
    assert out.returncode == DEPENDENCY and took < PROBES_BOUND_S, (took, out.stdout)
    assert line(out, "api:mistral").startswith("FAIL api:mistral: unreachable at http://127.0.0.1:9 (")
    assert [r.split()[1] for r in out.stdout.splitlines() if r.startswith("FAIL")] == ["api:mistral:"]


def test_without_the_agents_key_status_says_every_launch_fails(configured):
    env, _ = configured
    env = {k: v for k, v in env.items() if k != "SYNEDRE_ANTHROPIC_API_KEY"}
    out, _ = status(env)
    assert out.returncode == DEPENDENCY
    assert line(out, "api:anthropic") == ("FAIL api:anthropic: no key (SYNEDRE_ANTHROPIC_API_KEY): every launch"
                                          " fails (the agent's CLI needs it)")
