"""The one place that reads the environment (prefix SYNEDRE_, `.env` supported)."""
import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from synedre import ROOT

# The providers whose key a Settings resolves (SYNEDRE_<PROVIDER>_API_KEY or a key file).
KEYED_PROVIDERS = ("mistral", "openai", "anthropic")

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

    clamd: str = "/var/run/clamav/clamd.ctl"  # Unix socket path, or host:port
    scan_timeout_s: float = 60.0
    max_attachment_bytes: int = 25 * 1024 * 1024
    max_scan_bytes: int = 50 * 1024 * 1024  # per message
    ocr_languages: str = "fra+eng"
    ocr_timeout_s: float = 60.0
    llm_retries: int = 5  # an unreachable LLM is retried this many times, then classify_failed
    llm_retry_base_s: float = 10.0  # first retry delay, doubled each time (capped at 300 s)

    # Launch (SPEC §8)
    spawn_disabled: bool = False  # the environment kill switch
    claude_bin: str = "claude"
    workspace_repo: Path | None = None  # the repository agents work in
    workspace_base_branch: str = "preprod"
    idle_timeout_s: float = 1200.0
    hard_timeout_s: float = 6600.0
    launch_budget_s: float = 2400.0
    max_budget_usd: float = 5.0  # per launch (--max-budget-usd)
    max_message_cost_usd: float = 20.0  # all launches of one message together
    daily_spend_cap_usd: float = 200.0  # fleet-wide, per UTC day
    max_concurrent_launches: int = 3
    spawn_slot_retry_s: float = 30.0  # a launch finding every slot taken comes back after this
    # The OS user the agent runs as when the worker is root (scripts/system-deps creates it):
    # it owns its clone and home, cannot read the worker's environment nor the state
    # directory, and IS_SANDBOX is then not set. A worker that is not root runs the agent as
    # itself, confined by the sandbox alone.
    agent_user: str = "synedre-agent"
    # The explicit opt-out: a root worker runs the agent as root (sandboxed still; `synedre
    # status` warns while it is on).
    agent_as_root: bool = False
    # Comma list of domains the agent's commands may reach through the sandbox's proxy;
    # empty = no network at all (SPEC §8 Sandbox).
    agent_allowed_domains: str = ""
    # Comma list of the agent's tools to keep, from the built-in lists of synedre.agent_tools;
    # unset = all of them. It can only narrow (SPEC §13): another name fails at load.
    agent_tools: str | None = None
    db_timeout_s: float = 10.0

    # After the launch (SPEC §9)
    deploy_timeout_s: float = 900.0  # ./deploy <target> --preprod
    qa_timeout_s: float = 30.0  # per HTTP request and browser step
    iso_threshold: float = 0.05  # share of differing pixels over which a page is an iso_mismatch
    max_iterations: int = 3  # launches per message when QA fails
    max_iso_iterations: int = 8  # when the only failure is a mock-up mismatch

    # AI facade: a key comes from SYNEDRE_<PROVIDER>_API_KEY, else from the file
    # <ai_keys_dir>/<provider> (a mounted secret); values stay in SecretStr until used.
    mistral_api_key: SecretStr | None = None
    mistral_server_url: str | None = None  # without /v1: the SDK's paths start with /v1
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None  # with /v1, e.g. https://api.deepseek.com/v1
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None  # without /v1
    ai_keys_dir: Path | None = None
    # Flower's own variable ("user:pass[,user2:pass2]"), read here only to redact it.
    flower_basic_auth: SecretStr | None = Field(default=None, validation_alias="FLOWER_BASIC_AUTH")
    # `synedre flower`: where it listens (loopback unless told otherwise), and the file of
    # its credentials (a mounted secret: "user:pass" lines) when FLOWER_BASIC_AUTH is unset.
    flower_address: str = "127.0.0.1"
    flower_port: int = 5555
    flower_auth_file: Path | None = None

    @field_validator("agent_tools")
    @classmethod
    def _agent_tools_only_narrow(cls, v: str | None) -> str | None:
        from synedre.agent_tools import configured  # the built-in lists live with the launch

        configured(v)  # raises ToolsWidened (a ValueError) naming what would widen
        return v

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

    def flower_auth(self) -> tuple[SecretStr | None, str | None]:
        """(credentials as Flower reads them, "user:pass[,user2:pass2]", None), else (None, the
        readable reason): from FLOWER_BASIC_AUTH, else from the file SYNEDRE_FLOWER_AUTH_FILE
        (one pair a line or comma-separated). A reason never quotes the value."""
        if self.flower_basic_auth is not None and self.flower_basic_auth.get_secret_value().strip():
            raw, where = self.flower_basic_auth.get_secret_value(), "FLOWER_BASIC_AUTH"
        elif self.flower_auth_file is not None:
            where = str(self.flower_auth_file)
            try:
                raw = self.flower_auth_file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                return None, f"Flower credentials unreadable ({where}: {type(exc).__name__})"
        else:
            return None, "no Flower credentials (FLOWER_BASIC_AUTH or SYNEDRE_FLOWER_AUTH_FILE)"
        pairs = [p.strip() for p in raw.replace("\n", ",").split(",") if p.strip()]
        if not pairs:
            return None, f"no Flower credentials ({where} is empty)"
        for n, pair in enumerate(pairs, 1):
            user, sep, password = pair.partition(":")
            if not (user and sep and password):
                return None, f"Flower credentials in {where}: entry {n} is not user:password"
        return SecretStr(",".join(pairs)), None

    @property
    def attachments_root(self) -> Path:
        return self.attachments_dir or self.state_dir / "attachments"

    @property
    def migrations_dir(self) -> Path:
        return ROOT / "migrations"


@lru_cache
def get_settings() -> Settings:
    return Settings()


def secret_from_env(name: str) -> str | None:
    """A secret referenced by the *name* of its variable (e.g. a mailbox's password_env)."""
    return os.environ.get(name) or None
