"""Provider keys and endpoints for the AI facade (prefix SYNEDRE_, `.env` supported).

A key comes from `SYNEDRE_<PROVIDER>_API_KEY`, else from the file `<ai_keys_dir>/<provider>`
(a mounted secret). Key values stay inside `SecretStr` until the SDK call that needs them.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class AISettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SYNEDRE_", env_file=".env", extra="ignore")

    mistral_api_key: SecretStr | None = None
    mistral_server_url: str | None = None  # without /v1: the SDK's paths start with /v1
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None  # with /v1, e.g. https://api.deepseek.com/v1
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None  # without /v1
    ai_keys_dir: Path | None = None

    def resolve_key(self, provider: str) -> tuple[SecretStr | None, str | None]:
        """(key, None) when a key is configured, else (None, the readable reason)."""
        env_name = f"SYNEDRE_{provider.upper()}_API_KEY"
        key: SecretStr | None = getattr(self, f"{provider}_api_key", None)
        if key is not None and key.get_secret_value().strip():
            return SecretStr(key.get_secret_value().strip()), None
        if self.ai_keys_dir is None:
            return None, f"no key ({env_name})"
        path = self.ai_keys_dir / provider
        try:
            value = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None, f"no key ({env_name} or {path})"
        except OSError as exc:  # the reason names the file, never its content
            return None, f"key file unreadable ({path}: {type(exc).__name__})"
        if not value:
            return None, f"no key ({env_name}; {path} is empty)"
        return SecretStr(value), None

    def secret_values(self) -> list[str]:
        """Every configured key value, so error texts can be scrubbed of them."""
        values = []
        for provider in ("mistral", "openai", "anthropic"):
            key, _ = self.resolve_key(provider)
            if key is not None:
                values.append(key.get_secret_value())
        return values


@lru_cache
def get_ai_settings() -> AISettings:
    return AISettings()
