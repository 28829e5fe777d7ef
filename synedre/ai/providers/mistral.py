"""Mistral through the official `mistralai` SDK (chat and embeddings)."""
from __future__ import annotations

import typing
from functools import cache, lru_cache
from typing import Any

from synedre.ai.providers.base import Messages, Provider, client_cache, list_models
from synedre.config import Settings


@cache  # patch once per process
def _reuse_sdk_model_classes() -> None:
    """The SDK builds a throwaway pydantic model class for every (un)marshal, about 12 ms
    of CPU per chat call, the largest cost of a classification. The class depends only
    on its name and type, with the same config every time, so build each one once."""
    from mistralai.client.utils import serializers

    original = serializers.create_model

    @lru_cache(maxsize=512)
    def build(name: str, typ: Any) -> Any:
        return original(name, body=(typ, ...), __config__=serializers.ConfigDict(
            populate_by_name=True, arbitrary_types_allowed=True))

    def create_model(name: str, *, body: tuple, __config__: Any = None) -> Any:
        try:
            return build(name, body[0])
        except TypeError:  # an unhashable type: nothing to reuse
            return original(name, body=body, __config__=__config__)

    serializers.create_model = create_model  # type: ignore[assignment]  # a narrower signature: our callers' one

    # Building a request reads its parameter classes' type hints (`typing.get_type_hints`,
    # about 3 ms of CPU a chat call): a class's hints never change, so read them once. The
    # SDK only reads the dict it gets back.
    from mistralai.client.utils import forms, queryparams, url

    hints = lru_cache(maxsize=512)(typing.get_type_hints)
    for module in (forms, queryparams, url):
        module.get_type_hints = hints  # type: ignore[attr-defined]


@client_cache
def _client(api_key: str, server_url: str | None) -> Any:
    from mistralai.client import Mistral
    from mistralai.client.utils import BackoffStrategy, RetryConfig

    _reuse_sdk_model_classes()

    # Retries belong to the facade's fallback order; an SDK backoff would outlive the timeout.
    no_retry = RetryConfig("none", BackoffStrategy(0, 0, 1.0, 0), False)
    return Mistral(api_key=api_key, server_url=server_url, retry_config=no_retry)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # chunked content (e.g. reasoning models): keep the text chunks
        return "".join(getattr(c, "text", "") for c in content if getattr(c, "type", None) == "text")
    return ""  # UNSET / None


class MistralProvider(Provider):
    name = "mistral"
    url_variable = "SYNEDRE_MISTRAL_SERVER_URL"
    sdk = "urllib.request"  # the probe's client (the SDK's import is CPU a loaded host lacks)
    default_url = "https://api.mistral.ai"
    url_form = "the server's root, without /v1 (the SDK adds /v1/chat/completions, /v1/embeddings)"

    def probe(self, timeout: float, *, settings: Settings) -> int:
        """The models list over plain HTTP, as the SDK asks for it (GET /v1/models, bearer key)."""
        base = (self.base_url(settings) or "").rstrip("/")
        return list_models(f"{base}/v1/models", {"Authorization": f"Bearer {self.api_key(settings)}"}, timeout)

    def _client(self, settings: Settings) -> Any:
        return _client(self.api_key(settings), settings.mistral_server_url)

    def complete(self, model: str, messages: Messages, timeout: float, json_output: bool,
                 temperature: float, max_tokens: int | None, *,
                 settings: Settings) -> tuple[str, int, int]:
        extra: dict[str, Any] = {}
        if max_tokens is not None:
            extra["max_tokens"] = max_tokens
        if json_output:
            extra["response_format"] = {"type": "json_object"}
        res = self._client(settings).chat.complete(
            model=model, messages=messages, temperature=temperature,
            timeout_ms=int(timeout * 1000), **extra)  # the SDK's timeout is in milliseconds
        usage = res.usage
        return (_text(res.choices[0].message.content),
                usage.prompt_tokens or 0, usage.completion_tokens or 0)

    def embed(self, model: str, texts: list[str], timeout: float, *,
              settings: Settings) -> tuple[list[list[float]], int]:
        res = self._client(settings).embeddings.create(
            model=model, inputs=texts, timeout_ms=int(timeout * 1000))
        data = sorted(res.data, key=lambda d: d.index or 0)
        return [list(d.embedding or []) for d in data], res.usage.prompt_tokens or 0
