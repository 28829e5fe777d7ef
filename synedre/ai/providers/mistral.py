"""Mistral through the official `mistralai` SDK (chat and embeddings)."""
from __future__ import annotations

from typing import Any

from synedre.ai.providers.base import Messages, Provider, client_cache
from synedre.config import Settings


@client_cache
def _client(api_key: str, server_url: str | None) -> Any:
    from mistralai.client import Mistral
    from mistralai.client.utils import BackoffStrategy, RetryConfig

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
