"""Anthropic's Messages API through the `anthropic` SDK (chat only: it has no embeddings)."""
from __future__ import annotations

import re
from typing import Any

from synedre.ai.providers.base import Messages, Provider, client_cache, list_models
from synedre.config import Settings

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"  # the header every Messages API call carries
DEFAULT_MAX_TOKENS = 4096  # the Messages API requires a bound
# Its only JSON mode is a full json_schema (output_config.format), and the facade has no schema:
# ask for JSON in the system text, and unwrap the Markdown fence models sometimes still add.
JSON_INSTRUCTION = "Answer with one JSON object and nothing else: no prose, no Markdown fence."
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


@client_cache
def _client(api_key: str, base_url: str) -> Any:
    from anthropic import Anthropic

    # Explicit base URL (never ANTHROPIC_BASE_URL from the environment); max_retries=0 so the
    # route's timeout is the real bound.
    return Anthropic(api_key=api_key, base_url=base_url, max_retries=0)


def split_system(messages: Messages) -> tuple[str, Messages]:
    """The Messages API takes system text as a parameter, not as a message."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
    return "\n\n".join(system), rest


class AnthropicProvider(Provider):
    name = "anthropic"
    url_variable = "SYNEDRE_ANTHROPIC_BASE_URL"
    sdk = "urllib.request"  # the probe's client: the SDK's import alone takes seconds of CPU
    default_url = DEFAULT_BASE_URL
    url_form = "the server's root, without /v1 (the SDK and the agent's CLI add /v1/messages)"

    def probe(self, timeout: float, *, settings: Settings) -> int:
        """The models list over plain HTTP, as the SDK asks for it (its headers, its path): the
        agent's CLI, not this SDK, is what talks to this API in a launch."""
        base = (settings.anthropic_base_url or DEFAULT_BASE_URL).rstrip("/")
        return list_models(f"{base}/v1/models?limit=1000", {
            "x-api-key": self.api_key(settings), "anthropic-version": API_VERSION}, timeout)

    def complete(self, model: str, messages: Messages, timeout: float, json_output: bool,
                 temperature: float, max_tokens: int | None, *,
                 settings: Settings) -> tuple[str, int, int]:
        system, chat = split_system(messages)
        if json_output:
            system = f"{system}\n\n{JSON_INSTRUCTION}".strip()
        extra: dict[str, Any] = {"system": system} if system else {}
        client = _client(self.api_key(settings), settings.anthropic_base_url or DEFAULT_BASE_URL)
        # No temperature: the SDK (2.x) no longer has sampling parameters for the Messages API.
        res = client.messages.create(
            model=model, messages=chat, max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
            timeout=timeout, **extra)
        text = "".join(b.text for b in res.content if b.type == "text")
        if json_output and (m := _FENCE.match(text)):
            text = m.group(1)
        return text, res.usage.input_tokens, res.usage.output_tokens
