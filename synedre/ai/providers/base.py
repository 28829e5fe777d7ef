"""What every provider offers the facade; an unsupported operation raises NotImplementedError."""
from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

from synedre.config import Settings

Messages = list[dict[str, Any]]
F = TypeVar("F", bound=Callable[..., Any])


class Provider:
    name: str = ""
    # Where the provider's server is set, its default, and the form the SDK expects it in.
    url_variable: str | None = None
    default_url: str | None = None
    url_form: str = ""
    sdk: str = ""  # the module its client comes from: imported before a probe's clock starts

    def base_url(self, settings: Settings) -> str | None:
        if self.url_variable is None:
            return None
        return getattr(settings, self.url_variable.removeprefix("SYNEDRE_").lower()) or self.default_url

    def probe(self, timeout: float, *, settings: Settings) -> int:
        """The cheapest authenticated call (listing the models, free of charge): how many the
        server lists; raises as the SDK does (a refused key, a wrong URL, no answer)."""
        raise NotImplementedError

    def available(self, settings: Settings) -> str | None:
        """None when usable, else why not (never the key itself)."""
        return settings.resolve_key(self.name)[1]

    def api_key(self, settings: Settings) -> str:
        key, reason = settings.resolve_key(self.name)
        if key is None:
            raise RuntimeError(f"{self.name}: {reason}")
        return key.get_secret_value()

    def complete(self, model: str, messages: Messages, timeout: float, json_output: bool,
                 temperature: float, max_tokens: int | None, *,
                 settings: Settings) -> tuple[str, int, int]:
        """(text, input tokens, output tokens)."""
        raise NotImplementedError

    def embed(self, model: str, texts: list[str], timeout: float, *,
              settings: Settings) -> tuple[list[list[float]], int]:
        """(one vector per text, input tokens)."""
        raise NotImplementedError


class ProbeRefused(RuntimeError):
    """The API answered the probe with an HTTP error (`status_code`, as the SDKs' errors carry it)."""

    def __init__(self, status_code: int, reason: object) -> None:
        super().__init__(f"HTTP {status_code}: {reason}")
        self.status_code = status_code


def list_models(url: str, headers: dict[str, str], timeout: float) -> int:
    """How many models a provider's models list holds, asked over plain HTTP as its SDK asks
    (`ProbeRefused` for an HTTP error): an SDK's import alone is a second of CPU on a loaded
    host, which `synedre status` would pay within its bound."""
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"accept": "application/json", **headers}),
                                    timeout=timeout) as answer:
            return len(json.load(answer).get("data") or [])
    except urllib.error.HTTPError as exc:
        raise ProbeRefused(exc.code, exc.reason) from None


def client_cache(factory: F) -> F:
    """One SDK client (and its connection pool) per key and URL, never shared across a fork."""
    cached = lru_cache(maxsize=8)(factory)
    os.register_at_fork(after_in_child=cached.cache_clear)
    return cached  # type: ignore[return-value]
