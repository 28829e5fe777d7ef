"""Any OpenAI-compatible API (OpenAI, DeepSeek, GLM, vLLM, Ollama) through the `openai` SDK."""
from __future__ import annotations

from typing import Any

from synedre.ai.providers.base import Messages, Provider, client_cache
from synedre.config import Settings

DEFAULT_BASE_URL = "https://api.openai.com/v1"


@client_cache
def _client(api_key: str, base_url: str) -> Any:
    from openai import OpenAI

    # max_retries=0: the SDK retries 429/5xx/timeouts twice by default, which would triple
    # the route's timeout before the facade could fall back.
    return OpenAI(api_key=api_key, base_url=base_url, max_retries=0)


class OpenAICompatProvider(Provider):
    name = "openai"
    sdk = "openai"
    url_variable = "SYNEDRE_OPENAI_BASE_URL"
    default_url = DEFAULT_BASE_URL
    url_form = "with /v1 (the SDK adds /chat/completions, /embeddings)"

    def probe(self, timeout: float, *, settings: Settings) -> int:
        return len(self._client(settings).models.list(timeout=timeout).data)

    def _client(self, settings: Settings) -> Any:
        # Always explicit, so the SDK never falls back to OPENAI_BASE_URL from the environment.
        return _client(self.api_key(settings), settings.openai_base_url or DEFAULT_BASE_URL)

    def complete(self, model: str, messages: Messages, timeout: float, json_output: bool,
                 temperature: float, max_tokens: int | None, *,
                 settings: Settings) -> tuple[str, int, int]:
        extra: dict[str, Any] = {}
        if max_tokens is not None:
            extra["max_tokens"] = max_tokens  # not max_completion_tokens: compatible servers know this one
        if json_output:
            extra["response_format"] = {"type": "json_object"}
        res = self._client(settings).chat.completions.create(
            model=model, messages=messages, temperature=temperature, timeout=timeout, **extra)
        usage = res.usage  # some compatible servers omit it
        return (res.choices[0].message.content or "",
                usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0)

    def embed(self, model: str, texts: list[str], timeout: float, *,
              settings: Settings) -> tuple[list[list[float]], int]:
        # The SDK asks for base64 unless told otherwise; not every compatible server speaks it.
        res = self._client(settings).embeddings.create(
            model=model, input=texts, encoding_format="float", timeout=timeout)
        data = sorted(res.data, key=lambda d: d.index)
        return [list(d.embedding) for d in data], res.usage.prompt_tokens if res.usage else 0
