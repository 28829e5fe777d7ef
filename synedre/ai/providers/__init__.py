"""One module per provider; `PROVIDERS` is the registry the routing table's names refer to."""
from __future__ import annotations

from synedre.ai.providers.anthropic import AnthropicProvider
from synedre.ai.providers.base import Provider
from synedre.ai.providers.local import LocalProvider
from synedre.ai.providers.mistral import MistralProvider
from synedre.ai.providers.openai_compat import OpenAICompatProvider

PROVIDERS: dict[str, Provider] = {
    p.name: p for p in (MistralProvider(), OpenAICompatProvider(), AnthropicProvider(), LocalProvider())
}

__all__ = ["PROVIDERS", "Provider"]
