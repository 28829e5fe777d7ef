"""The AI facade against the real SDKs and a scripted local API (tests/services/llm_server.py)."""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import structlog
from structlog.testing import capture_logs

from synedre.ai import AIError, Route, complete, embed, facade, last_failure
from synedre.ai.facade import FeatureRouting, load_routing
from synedre.config import get_settings
from tests.services.llm_server import HTTPError, start_llm_server

KEYS = {"mistral": "mk-test-5f1e9a", "openai": "sk-test-0c7d42", "anthropic": "sk-ant-test-9b3e11"}
MISTRAL = Route("mistral", "mistral-small-latest")
OPENAI = Route("openai", "gpt-4o-mini")
ANTHROPIC = Route("anthropic", "claude-sonnet-5-5")
LOCAL = Route("local", "hash-1024")
CHAT_ROUTES = {"mistral": MISTRAL, "openai": OPENAI, "anthropic": ANTHROPIC}
ASK = [{"role": "system", "content": "You sort emails."}, {"role": "user", "content": "Please fix the login"}]
AI_ENV = [f"SYNEDRE_{p.upper()}_API_KEY" for p in KEYS] + [
    "SYNEDRE_MISTRAL_SERVER_URL", "SYNEDRE_OPENAI_BASE_URL", "SYNEDRE_ANTHROPIC_BASE_URL",
    "SYNEDRE_AI_KEYS_DIR"]


def routing(*routes: Route, timeout_s: float = 10.0, json_output: bool = False) -> FeatureRouting:
    return FeatureRouting("test_feature", list(routes), timeout_s, json_output)


@pytest.fixture(autouse=True)
def no_ai_config(monkeypatch, tmp_path):
    """No key, no URL: each test configures exactly what it uses (and no developer .env)."""
    monkeypatch.chdir(tmp_path)
    for name in AI_ENV:
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def llm(monkeypatch):
    """Start a scripted server and point every provider (with its key) at it."""
    servers = []

    def start(script=lambda request, path: "ok", *, keys=tuple(KEYS), delay_s=0.0):
        server = start_llm_server(script, delay_s=delay_s)
        servers.append(server)
        monkeypatch.setenv("SYNEDRE_MISTRAL_SERVER_URL", server.url)
        monkeypatch.setenv("SYNEDRE_OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("SYNEDRE_ANTHROPIC_BASE_URL", server.url)
        for provider in keys:
            monkeypatch.setenv(f"SYNEDRE_{provider.upper()}_API_KEY", KEYS[provider])
        get_settings.cache_clear()
        return server

    yield start
    for server in servers:
        server.stop()


def by_model(answers: dict):
    """A script answering per model: a value, an exception to raise, or a callable."""
    def script(request, path):
        answer = answers[request["model"]]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer
    return script


@pytest.mark.timeout(60)
@pytest.mark.parametrize("provider", ["mistral", "openai", "anthropic"])
def test_each_chat_provider_answers_through_its_sdk(llm, provider):
    route = CHAT_ROUTES[provider]
    server = llm(lambda request, path: "the answer is run")

    result = complete("test_feature", ASK, routing=routing(route), max_tokens=200)

    assert result is not None and last_failure() is None
    assert (result.text, result.provider, result.model) == ("the answer is run", provider, route.model)
    assert result.input_tokens > 0 and result.output_tokens == 4 and result.duration_s > 0
    assert result.feature == "test_feature"
    [request] = server.requests
    assert request.path == ("/v1/messages" if provider == "anthropic" else "/v1/chat/completions")
    assert request.body["model"] == route.model and request.body["max_tokens"] == 200
    if provider != "anthropic":  # the anthropic SDK has no sampling parameters any more
        assert request.body["temperature"] == 0.0
    credential = request.headers.get("x-api-key") or request.headers.get("authorization")
    assert credential == "[redacted]"  # sent, and never recorded
    if provider == "anthropic":  # system text moves to its own parameter
        assert request.body["system"] == "You sort emails."
        assert request.body["messages"] == [{"role": "user", "content": "Please fix the login"}]
    else:
        assert request.body["messages"] == ASK


@pytest.mark.timeout(60)
def test_the_mistral_sdk_reads_a_request_class_s_type_hints_once_per_process(llm):
    from mistralai.client.utils import queryparams, url

    server = llm(lambda request, path: "the answer is run")
    for _ in range(3):
        assert complete("test_feature", ASK, routing=routing(MISTRAL), max_tokens=200).text == "the answer is run"
    assert len(server.requests) == 3
    hints = queryparams.get_type_hints
    assert url.get_type_hints is hints and hints.cache_info().hits >= 2  # the second and third calls: cached


@pytest.mark.timeout(60)
@pytest.mark.parametrize("provider", ["mistral", "openai"])
def test_each_embedding_provider_answers_through_its_sdk(llm, provider):
    route = Route(provider, "mistral-embed" if provider == "mistral" else "text-embedding-3-small")
    server = llm()

    result = embed("lessons_embedding", ["deploy the site", "fix the invoice"], routing=routing(route))

    assert result is not None and last_failure() is None
    assert (result.provider, result.model) == (provider, route.model)
    assert [len(v) for v in result.vectors] == [1024, 1024]
    assert result.input_tokens > 0 and result.duration_s > 0
    [request] = server.requests
    assert request.path == "/v1/embeddings"
    if provider == "openai":  # floats, not the SDK's default base64 some servers lack
        assert request.body["encoding_format"] == "float"


@pytest.mark.timeout(60)
def test_local_embeddings_work_offline_and_put_similar_texts_near():
    texts = ["Le site de production est en panne depuis ce matin",
             "le site de production est tombé en panne ce matin",
             "Merci pour la facture du mois de mars"]

    result = embed("lessons_embedding", texts, routing=routing(MISTRAL, LOCAL))

    assert result is not None and (result.provider, result.model) == ("local", "hash-1024")
    a, b, c = result.vectors

    def dot(x, y):
        return sum(p * q for p, q in zip(x, y, strict=True))

    assert all(len(v) == 1024 and abs(dot(v, v) - 1) < 1e-9 for v in result.vectors)
    assert dot(a, b) > 0.6 > 0.2 > dot(a, c)
    again = embed("lessons_embedding", texts, routing=routing(LOCAL))
    assert again.vectors == result.vectors  # deterministic across calls (and processes)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("primary,fallback", [("mistral", "openai"), ("openai", "anthropic"),
                                              ("anthropic", "mistral")])
def test_primary_http_500_falls_back_without_sdk_retries(llm, primary, fallback):
    first, second = CHAT_ROUTES[primary], CHAT_ROUTES[fallback]
    server = llm(by_model({first.model: HTTPError(500, "overloaded"), second.model: "fallback answer"}))

    result = complete("test_feature", ASK, routing=routing(first, second))

    assert result is not None and last_failure() is None
    assert (result.text, result.provider, result.model) == ("fallback answer", fallback, second.model)
    assert result.input_tokens > 0 and result.output_tokens == 2 and result.duration_s > 0
    # Exactly one request each: the SDK did not retry the 500 behind the facade's back.
    assert [r.body["model"] for r in server.requests] == [first.model, second.model]


@pytest.mark.timeout(60)
def test_rate_limited_route_moves_on_at_once(llm):
    server = llm(by_model({OPENAI.model: HTTPError(429, "slow down", {"retry-after": "30"}),
                           ANTHROPIC.model: "ok"}))

    started = time.monotonic()
    result = complete("test_feature", ASK, routing=routing(OPENAI, ANTHROPIC))

    assert result.provider == "anthropic" and time.monotonic() - started < 5
    assert len(server.requests) == 2


@pytest.mark.timeout(60)
def test_missing_key_is_skipped_without_a_request(llm):
    server = llm(keys=("openai",))

    result = complete("test_feature", ASK, routing=routing(MISTRAL, ANTHROPIC, OPENAI))

    assert result.provider == "openai"
    assert [r.body["model"] for r in server.requests] == [OPENAI.model]


@pytest.mark.timeout(60)
def test_all_routes_failing_returns_none_and_explains_each_attempt(llm):
    llm(by_model({OPENAI.model: HTTPError(500, "upstream exploded")}), keys=("openai",))

    result = complete("atlas_classifier", ASK, routing=routing(MISTRAL, OPENAI, LOCAL))

    assert result is None
    assert last_failure() == (
        "mistral/mistral-small-latest: skipped, no key (SYNEDRE_MISTRAL_API_KEY); "
        "openai/gpt-4o-mini: InternalServerError: Error code: 500 - upstream exploded; "
        "local/hash-1024: unsupported (complete)")


@pytest.mark.timeout(60)
def test_embedding_failures_are_explained_too(llm):
    llm(by_model({"mistral-embed": HTTPError(503, "maintenance")}), keys=("mistral", "anthropic"))

    assert embed("x", ["a"], routing=routing(Route("mistral", "mistral-embed"), ANTHROPIC)) is None
    failure = last_failure()
    assert failure.startswith("mistral/mistral-embed: SDKError: API error occurred: Status 503")
    assert failure.endswith("anthropic/claude-sonnet-5-5: unsupported (embed)")


@pytest.mark.timeout(60)
def test_last_failure_is_reset_by_the_next_call(llm, monkeypatch):
    llm(by_model({"broken": HTTPError(500, "no"), OPENAI.model: "fine"}))

    assert complete("f", ASK, routing=routing(Route("openai", "broken"))) is None
    assert "openai/broken: InternalServerError" in last_failure()
    assert complete("f", ASK, routing=routing(OPENAI)).text == "fine"
    assert last_failure() is None
    assert complete("f", ASK, routing=routing(Route("openai", "broken"))) is None

    def unknown_feature(feature):
        raise AIError(f"no AI routing for feature {feature!r}")

    monkeypatch.setattr(facade, "load_routing", unknown_feature)
    with pytest.raises(AIError):  # even a call that raises does not leave the old failure
        complete("nosuch", ASK)
    assert last_failure() is None


@pytest.mark.timeout(60)
def test_last_failure_belongs_to_the_calling_thread(llm):
    llm(by_model({"broken": HTTPError(500, "no"), OPENAI.model: "fine"}))
    seen = {}

    def failing_call():
        complete("f", ASK, routing=routing(Route("openai", "broken")))
        seen["other"] = last_failure()

    assert complete("f", ASK, routing=routing(OPENAI)) is not None
    worker = threading.Thread(target=failing_call)
    worker.start()
    worker.join()
    assert "openai/broken" in seen["other"]
    assert last_failure() is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("provider", ["mistral", "openai", "anthropic"])
def test_slow_route_times_out_and_moves_on_within_about_the_timeout(llm, provider):
    slow = Route(provider, "slow-model")
    fast = MISTRAL if provider == "openai" else OPENAI

    def sleep_then_answer(request):
        time.sleep(5)
        return "too late"

    llm(by_model({"slow-model": sleep_then_answer, fast.model: "in time"}))

    started = time.monotonic()
    result = complete("f", ASK, routing=routing(slow, fast, timeout_s=1.0))
    elapsed = time.monotonic() - started

    assert result.text == "in time" and result.provider == fast.provider
    assert 1.0 <= elapsed < 2.5  # one timeout, no SDK retry, no unit mix-up (ms vs s)


@pytest.mark.timeout(60)
def test_timeout_of_every_route_is_reported(llm):
    llm(delay_s=3)

    started = time.monotonic()
    assert complete("f", ASK, routing=routing(MISTRAL, OPENAI, timeout_s=0.5)) is None
    assert time.monotonic() - started < 2.5
    first, second = last_failure().split("; ")
    assert first.startswith("mistral/mistral-small-latest: ReadTimeout")
    assert second.startswith("openai/gpt-4o-mini: APITimeoutError")


@pytest.mark.timeout(60)
def test_json_output_asks_each_provider_for_a_json_object(llm):
    server = llm(lambda request, path: '```json\n{"intent": "run"}\n```' if path == "/v1/messages"
                 else '{"intent": "run"}')

    for route in (MISTRAL, OPENAI, ANTHROPIC):
        result = complete("atlas_classifier", ASK, routing=routing(route, json_output=True))
        assert result.text == '{"intent": "run"}', route  # Anthropic's fence is unwrapped
    complete("draft_reply", ASK, routing=routing(OPENAI, json_output=False))

    mistral, openai, anthropic, plain = [r.body for r in server.requests]
    assert mistral["response_format"] == openai["response_format"] == {"type": "json_object"}
    assert "response_format" not in anthropic and "JSON object" in anthropic["system"]
    assert anthropic["system"].startswith("You sort emails.")
    assert "response_format" not in plain


@pytest.mark.timeout(60)
def test_empty_answer_moves_to_the_next_route(llm):
    llm(by_model({MISTRAL.model: "  ", OPENAI.model: "something"}))

    result = complete("f", ASK, routing=routing(MISTRAL, OPENAI))

    assert result.provider == "openai"


@pytest.mark.timeout(60)
def test_no_key_value_reaches_last_failure_or_the_logs(llm, monkeypatch, caplog, capsys):
    caplog.set_level(logging.DEBUG)  # including the SDKs' and httpx's own debug logging
    # An API that echoes the credential back in its error must not leak it either.
    llm(lambda request, path: HTTPError(401, f"invalid key {KEYS['mistral']} / {KEYS['openai']} "
                                             f"/ {KEYS['anthropic']}"))
    with capture_logs() as logs:
        monkeypatch.setattr(facade, "log", structlog.get_logger("synedre"))
        assert complete("f", ASK, routing=routing(MISTRAL, OPENAI, ANTHROPIC)) is None
        assert embed("f", ["x"], routing=routing(Route("mistral", "mistral-embed"),
                                                 Route("openai", "e"))) is None

    failure = last_failure()
    assert "[redacted]" in failure and "ai_all_routes_failed" in {e["event"] for e in logs}
    captured = capsys.readouterr()
    everything = "\n".join([failure, repr(logs), caplog.text, captured.out, captured.err])
    for key in KEYS.values():
        assert key not in everything


@pytest.mark.timeout(60)
def test_keys_may_come_from_files(llm, monkeypatch, tmp_path):
    server = llm(keys=())
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    (keys_dir / "openai").write_text(KEYS["openai"] + "\n")
    monkeypatch.setenv("SYNEDRE_AI_KEYS_DIR", str(keys_dir))
    get_settings.cache_clear()

    result = complete("f", ASK, routing=routing(MISTRAL, OPENAI))

    assert result.provider == "openai" and len(server.requests) == 1
    assert get_settings().resolve_key("mistral") == (
        None, f"no key (SYNEDRE_MISTRAL_API_KEY or {keys_dir / 'mistral'})")


@pytest.mark.timeout(60)
def test_unknown_provider_in_routing_is_a_loud_configuration_error():
    with pytest.raises(AIError, match="unknown provider.*mistrall/m"):
        routing(Route("mistrall", "m"))


@pytest.mark.timeout(60)
def test_hundreds_of_concurrent_calls_each_get_their_answer(llm):
    llm(lambda request, path: request["messages"][-1]["content"].upper(), delay_s=0.05)

    def ask(i):
        result = complete("f", [{"role": "user", "content": f"question {i}"}],
                          routing=routing(MISTRAL if i % 2 else OPENAI))
        return result.text if result else last_failure()

    with ThreadPoolExecutor(max_workers=100) as pool:
        answers = list(pool.map(ask, range(300)))

    assert answers == [f"QUESTION {i}" for i in range(300)]


@pytest.mark.timeout(120)
def test_routing_comes_from_the_database(db, llm, monkeypatch):
    server = llm(by_model({"mistral-small-latest": HTTPError(500, "down"), "gpt-4o-mini": '{"a": 1}',
                           "mistral-embed": None}),
                 keys=("mistral", "openai"))

    classifier = load_routing("atlas_classifier")
    assert classifier == FeatureRouting("atlas_classifier", [MISTRAL, OPENAI], 30.0, True)
    assert load_routing("lessons_embedding").routes == [Route("mistral", "mistral-embed"), LOCAL]
    with pytest.raises(AIError, match="no AI routing for feature 'nosuch'"):
        load_routing("nosuch")

    result = complete("atlas_classifier", ASK)  # routing read from the table
    assert (result.provider, result.model, result.text) == ("openai", "gpt-4o-mini", '{"a": 1}')
    assert server.requests[0].body["response_format"] == {"type": "json_object"}

    lesson = embed("lessons_embedding", ["une leçon"])
    assert (lesson.provider, len(lesson.vectors[0])) == ("mistral", 1024)
    monkeypatch.delenv("SYNEDRE_MISTRAL_API_KEY")
    get_settings.cache_clear()
    lesson = embed("lessons_embedding", ["une leçon"])  # same dimension, so pgvector still fits
    assert (lesson.provider, len(lesson.vectors[0])) == ("local", 1024)
