"""`synedre agent ask` (SPEC §9.8): one persona answers through the AI facade, journalled
like a launch (a row, its events, its cost against the daily cap)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from decimal import Decimal

import psycopg
import pytest

from synedre.config import get_settings
from tests.services import stack
from tests.services.llm_server import start_llm_server

QUESTION = "Comment rédiger la FAQ de la page tarifs ?"
CHAT = "/v1/chat/completions"


def _system(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "system")


def persona_voice(body: dict, path: str):
    """Answers in the voice the system prompt gives it: the persona's name signs it."""
    if path != CHAT:
        return None  # embeddings: deterministic vectors
    system = _system(body)
    name = system.split("Tu es ", 1)[1].split(" (", 1)[0] if "Tu es " in system else "personne"
    return f"Ici {name} : une question par bloc, la réponse en deux phrases."


@pytest.fixture
def llm(db, monkeypatch):
    server = start_llm_server(persona_voice)
    monkeypatch.setenv("SYNEDRE_MISTRAL_API_KEY", "mk-test-not-secret")
    monkeypatch.setenv("SYNEDRE_MISTRAL_SERVER_URL", server.url)
    for name in ("SYNEDRE_OPENAI_API_KEY", "SYNEDRE_ANTHROPIC_API_KEY", "SYNEDRE_MAILBOXES_FILE"):
        monkeypatch.delenv(name, raising=False)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("TRUNCATE synedre.agent_asks, synedre.incidents RESTART IDENTITY CASCADE")
    get_settings.cache_clear()
    yield server
    server.stop()
    get_settings.cache_clear()


def cli(*args: str) -> subprocess.CompletedProcess:
    """In a child process: the facade's logger is bound to the stderr it first saw, which
    CliRunner closes after each call."""
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], env=dict(os.environ), cwd=stack.ROOT,
                          capture_output=True, text=True, timeout=120)


def ask(*args: str) -> subprocess.CompletedProcess:
    return cli("agent", "ask", *args)


def test_agent_ask_answers_in_the_persona_s_voice_with_the_bundle_in_the_system_prompt(llm, db):
    result = ask("contenu", QUESTION)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Ici Colette :")
    chats = llm.bodies(CHAT)
    assert len(chats) == 1
    system = _system(chats[0])
    with psycopg.connect(db) as conn:
        mission, perimeter = conn.execute("SELECT job_mission, job_perimeter FROM synedre.agents"
                                          " WHERE codename = 'contenu'").fetchone()
    # the metier rendering of the persona bundle: identity, mission, perimeter
    assert system.startswith("Tu es Colette (contenu), ")
    assert f"Mission: {mission}"[:80] in system and f"Périmètre: {perimeter}"[:60] in system
    assert next(m["content"] for m in chats[0]["messages"] if m["role"] == "user") == QUESTION
    assert chats[0]["model"] == "mistral-small-latest"  # the agent_ask routing row


def test_agent_ask_is_journalled_with_its_events_and_cost(llm, db):
    result = ask("contenu", QUESTION, "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT agent_codename, status, provider, model, input_tokens, output_tokens,"
                           " cost_usd, answer, ended_at FROM synedre.agent_asks WHERE id = %s",
                           (out["ask_id"],)).fetchone()
        events = [r[0] for r in conn.execute("SELECT event_type FROM synedre.agent_ask_events"
                                             " WHERE ask_id = %s ORDER BY seq", (out["ask_id"],))]
        spent = conn.execute("SELECT usd FROM synedre.spend_today").fetchone()[0]
    codename, status, provider, model, tokens_in, tokens_out, cost, answer, ended = row
    assert (codename, status, provider, model) == ("contenu", "succeeded", "mistral", "mistral-small-latest")
    assert tokens_in > 0 and tokens_out > 0 and ended is not None
    # priced from synedre.ai_prices (0.1 / 0.3 USD per million tokens)
    micro = Decimal("0.000001")  # the column keeps micro-dollars
    assert cost == ((Decimal("0.1") * tokens_in + Decimal("0.3") * tokens_out) / 1_000_000).quantize(micro)
    assert cost > 0 and Decimal(out["cost_usd"]).quantize(micro) == cost and spent >= cost
    assert answer == out["answer"]
    assert events == ["ask_started", "persona_loaded", "ai_complete", "ask_done"]
    listed = cli("launches", "--asks", "--json")
    assert [(r["id"], r["agent_codename"], r["status"]) for r in json.loads(listed.stdout)] == \
        [(out["ask_id"], "contenu", "succeeded")]
    table = cli("launches", "--asks")
    assert "contenu" in table.stdout and "succeeded" in table.stdout


def test_agent_ask_over_the_daily_cap_is_refused_before_any_paid_call(llm, db, monkeypatch):
    monkeypatch.setenv("SYNEDRE_DAILY_SPEND_CAP_USD", "0")
    get_settings.cache_clear()
    result = ask("contenu", QUESTION)
    assert result.returncode == 1
    assert "fleet spend today" in result.stderr
    assert llm.bodies(CHAT) == []
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT status FROM synedre.agent_asks").fetchall() == [("refused",)]


def test_agent_ask_of_an_unknown_agent_fails_clearly(llm):
    result = ask("nobody", QUESTION)
    assert result.returncode == 2
    assert "no active agent 'nobody'" in result.stderr
    assert llm.bodies(CHAT) == []


@pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed")
def test_agent_ask_via_claude_runs_a_short_toolless_claude_p_with_the_persona_and_journals_it(llm, db, monkeypatch):
    from tests.services.claude_api import AUX_TEXT, ScriptedModel, start_claude_api

    api = start_claude_api(ScriptedModel([]))
    try:
        monkeypatch.setenv("SYNEDRE_ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("SYNEDRE_ANTHROPIC_API_KEY", "sk-ant-test-not-secret")
        monkeypatch.delenv("SYNEDRE_AGENT_USER", raising=False)
        result = ask("contenu", QUESTION, "--via", "claude", "--json")
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        # no tool at all (so the scripted API files it as a side request and answers that)
        asked = [r for r in api.requests
                 if r.path == "/v1/messages" and QUESTION in json.dumps(r.body, ensure_ascii=False)]
    finally:
        api.stop()
    assert asked and all(r.tools == [] for r in asked)
    system = json.dumps(asked[0].body.get("system"), ensure_ascii=False)
    assert "Tu es Colette (contenu), " in system and "Mission: " in system
    assert out["answer"] == AUX_TEXT and out["provider"] == "claude"
    assert llm.bodies(CHAT) == []  # not the facade
    with psycopg.connect(db) as conn:
        status, via, cost = conn.execute("SELECT status, via, cost_usd FROM synedre.agent_asks WHERE id = %s",
                                         (out["ask_id"],)).fetchone()
        events = [r[0] for r in conn.execute("SELECT event_type FROM synedre.agent_ask_events WHERE ask_id = %s"
                                             " ORDER BY seq", (out["ask_id"],))]
    assert (status, via) == ("succeeded", "claude") and cost is not None
    assert Decimal(out["cost_usd"]).quantize(Decimal("0.000001")) == cost
    assert events[:2] == ["ask_started", "persona_loaded"] and events[-2:] == ["ai_complete", "ask_done"]
    assert "claude:result" in events
