"""The one place that reads the environment (prefix SYNEDRE_, `.env` supported)."""
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from synedre import ROOT

# Well above the longest task (a 2,400 s launch budget plus its iterations), and the
# same for every process: the shortest value on one Redis database wins (SPEC §12b).
VISIBILITY_TIMEOUT_S = 12 * 3600


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SYNEDRE_", env_file=".env", extra="ignore")

    database_url: str | None = Field(
        default=None, description="PostgreSQL with pgvector; unset = embedded pgserver under state_dir"
    )
    broker_url: str = "redis://127.0.0.1:6379/0"
    mailboxes_file: Path | None = None
    dkim_keys_file: Path | None = None
    state_dir: Path = Path(".synedre")
    attachments_dir: Path | None = None  # default: <state_dir>/attachments
    log_format: str = "console"  # console | json
    log_level: str = "INFO"

    imap_timeout_s: float = 30.0
    poll_batch: int = 50
    poll_interval_s: float = 60.0
    poll_lock_ttl_s: float = 60.0
    dns_timeout_s: float = 5.0
    max_message_bytes: int = 64 * 1024 * 1024
    db_pool_max: int = 4
    db_timeout_s: float = 10.0

    @property
    def attachments_root(self) -> Path:
        return self.attachments_dir or self.state_dir / "attachments"

    @property
    def migrations_dir(self) -> Path:
        return ROOT / "migrations"


@lru_cache
def get_settings() -> Settings:
    return Settings()
