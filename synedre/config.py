"""The one place that reads the environment (prefix SYNEDRE_, `.env` supported)."""
import difflib
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from synedre import ROOT

# The providers whose key a Settings resolves (SYNEDRE_<PROVIDER>_API_KEY or a key file).
KEYED_PROVIDERS = ("mistral", "openai", "anthropic")

# Well above the longest task (a 2,400 s launch budget plus its iterations), and the
# same for every process: the shortest value on one Redis database wins (SPEC §12b).
VISIBILITY_TIMEOUT_S = 12 * 3600

# The accepted ranges, checked when settings load (each error names its variable).
Seconds = Annotated[float, Field(gt=0)]
Count = Annotated[int, Field(ge=1)]
Usd = Annotated[float, Field(ge=0)]


class ConfigError(ValueError):
    """Settings that do not load: one line per bad variable, naming it, its value (never a
    secret's, nor a URL's, which may carry a password) and what it accepts."""


class Settings(BaseSettings):
    # `.env` and a relative state directory are the project's, wherever a command runs from.
    model_config = SettingsConfigDict(env_prefix="SYNEDRE_", env_file=ROOT / ".env", extra="ignore")

    database_url: str | None = Field(
        default=None, description="PostgreSQL with pgvector; unset = embedded pgserver under state_dir"
    )
    broker_url: str = "redis://127.0.0.1:6379/0"
    mailboxes_file: Path | None = None
    dkim_keys_file: Path | None = None
    state_dir: Path = ROOT / ".synedre"  # a relative value is taken from the project root
    attachments_dir: Path | None = None  # default: <state_dir>/attachments
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"

    imap_timeout_s: Seconds = 30.0
    # A mailbox that refuses the login (or whose refresh token is refused) is tried again
    # after this, doubling each time up to the cap: the IDLE watcher never loops on it.
    mailbox_backoff_s: Annotated[float, Field(gt=0, le=3600)] = 5.0
    mailbox_backoff_max_s: Annotated[float, Field(gt=0, le=3600)] = 300.0
    poll_batch: Count = 50
    poll_interval_s: Seconds = 60.0
    poll_lock_ttl_s: Seconds = 60.0
    dns_timeout_s: Seconds = 5.0
    max_message_bytes: Count = 64 * 1024 * 1024
    db_pool_max: Count = 4

    clamd: str = "/var/run/clamav/clamd.ctl"  # Unix socket path, or host:port
    scan_timeout_s: Seconds = 60.0
    max_attachment_bytes: Count = 25 * 1024 * 1024
    max_scan_bytes: Count = 50 * 1024 * 1024  # per message
    ocr_languages: str = "fra+eng"
    ocr_timeout_s: Seconds = 60.0
    llm_retries: Annotated[int, Field(ge=0)] = 5  # an unreachable LLM is retried this many times, then classify_failed
    llm_retry_base_s: Seconds = 10.0  # first retry delay, doubled each time (capped at 300 s)

    # Launch (SPEC §8)
    spawn_disabled: bool = False  # the environment kill switch
    claude_bin: str = "claude"
    workspace_repo: Path | None = None  # the repository agents work in
    workspace_base_branch: str = "preprod"
    idle_timeout_s: Seconds = 1200.0
    hard_timeout_s: Seconds = 6600.0
    launch_budget_s: Seconds = 2400.0
    max_budget_usd: Annotated[float, Field(gt=0)] = 5.0  # per launch (--max-budget-usd)
    max_message_cost_usd: Annotated[float, Field(gt=0)] = 20.0  # all launches of one message together
    daily_spend_cap_usd: Usd = 200.0  # fleet-wide, per UTC day
    # Which first launches wait for the founder's OK (synedre/approvals/policy.py)
    approval_policy_file: Path = ROOT / "approval-policy.toml"
    max_concurrent_launches: Count = 3
    spawn_slot_retry_s: Seconds = 30.0  # a launch finding every slot taken comes back after this
    # A launch's lock and slot live this long without renewal (renewed every third of it): how
    # long a slot whose worker vanished stays taken, and how long after Redis lost its data a
    # launch without its lock is still taken as running.
    spawn_lock_ttl_s: Seconds = 60.0
    sweep_every_s: Seconds = 15.0  # the sweep's period (beat): stuck messages are offered again
    # A stage's claim is a lease renewed every quarter of this: one not renewed this long
    # belongs to a dead worker, and the sweep offers its message again.
    claim_lease_s: Annotated[float, Field(ge=4)] = 40.0
    # Resume: a launch stopped by the idle timeout is resumed once in its session (`--resume`)
    # while its budget remains; a session store kept for a resume goes after this many hours.
    auto_resume: bool = True
    session_retention_h: Annotated[float, Field(gt=0)] = 72.0
    # The OS user the agent runs as when the worker is root (scripts/system-deps creates it):
    # it owns its clone and home, cannot read the worker's environment nor the state
    # directory, and IS_SANDBOX is then not set. A worker that is not root runs the agent as
    # itself, confined by the sandbox alone.
    agent_user: str = "synedre-agent"
    # The explicit opt-out: a root worker runs the agent as root (sandboxed still; `synedre
    # status` warns while it is on).
    agent_as_root: bool = False
    # The OS user QA's Chromium runs as when the worker is root (scripts/system-deps creates
    # it), its own sandbox on; missing, QA's browser is unavailable, never run as root. A
    # worker that is not root runs it as itself.
    qa_user: str = "synedre-qa"
    # Comma list of domains the agent's commands may reach through the sandbox's proxy;
    # empty = no network at all (SPEC §8 Sandbox).
    agent_allowed_domains: str = ""
    # Comma list of the agent's tools to keep, from the built-in lists of synedre.agent_tools;
    # unset = all of them. It can only narrow (SPEC §13): another name fails at load.
    agent_tools: str | None = None
    # How often the agent's CLI retries a failed API call, waiting longer each time
    # (CLAUDE_CODE_MAX_RETRIES); unset, the CLI's own count (10: a refused key fails the
    # launch only after minutes of retries).
    agent_api_retries: Annotated[int, Field(ge=0)] | None = None
    db_timeout_s: Seconds = 10.0

    # After the launch (SPEC §9)
    deploy_timeout_s: Seconds = 900.0  # ./deploy <target> --preprod
    # What the agent wrote never runs as the fleet (SPEC §13): ./deploy runs as this OS user
    # (scripts/system-deps creates it; a root worker switches to it), inside this sandbox
    # runtime (npm @anthropic-ai/sandbox-runtime); either missing fails the deploy, closed.
    deploy_user: str = "synedre-deploy"
    deploy_sandbox: str = "srt"
    qa_timeout_s: Seconds = 30.0  # per HTTP request and browser step
    # share of differing pixels over which a page is an iso_mismatch
    iso_threshold: Annotated[float, Field(ge=0, le=1)] = 0.05
    max_iterations: Count = 3  # launches per message when QA fails
    max_iso_iterations: Count = 8  # when the only failure is a mock-up mismatch
    # Lessons (SPEC §9.8): a new one this close (cosine similarity) to a lesson of the same
    # client and agent says that one again instead of being stored twice.
    lesson_same_above: Annotated[float, Field(gt=0, le=1)] = 0.9
    # The patch a recap attaches (redacted), cut at a hunk boundary to this many bytes; 0 = no
    # patch (the table of files changed stays)
    recap_patch_max_bytes: Annotated[int, Field(ge=0)] = 200_000

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
    flower_port: Annotated[int, Field(ge=1, le=65535)] = 5555
    flower_auth_file: Path | None = None

    @field_validator("agent_tools")
    @classmethod
    def _agent_tools_only_narrow(cls, v: str | None) -> str | None:
        from synedre.agent_tools import configured  # the built-in lists live with the launch

        configured(v)  # raises ToolsWidened (a ValueError) naming what would widen
        return v

    @field_validator("mailbox_backoff_max_s")
    @classmethod
    def _cap_above_first(cls, v: float, info: ValidationInfo) -> float:
        first = info.data.get("mailbox_backoff_s")
        if first is not None and v < first:
            raise ValueError(f"below SYNEDRE_MAILBOX_BACKOFF_S ({first:g}): give the cap, at least the first delay")
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_capitals(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @field_validator("database_url")
    @classmethod
    def _a_postgresql_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith(("postgresql://", "postgres://")):
            raise ValueError("not a PostgreSQL URL: postgresql://user[:password]@host[:port]/database,"
                             " or unset for the embedded server")
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        try:  # libpq's parser; its message may quote the URL, password included: never shown
            conninfo_to_dict(v)
        except psycopg.Error:
            raise ValueError("not a PostgreSQL URL libpq can read: postgresql://user[:password]@host[:port]/database"
                             " (special characters of the password percent-encoded)") from None
        return v

    @field_validator("broker_url")
    @classmethod
    def _a_redis_url(cls, v: str) -> str:
        from urllib.parse import urlsplit

        if not v.startswith(("redis://", "rediss://")):
            raise ValueError("not a Redis URL: redis://[:password@]host:port/database (rediss:// with TLS)")
        try:  # a port that is not a number, an unclosed IPv6 bracket (the message quotes neither)
            _ = urlsplit(v).port
        except ValueError as exc:
            raise ValueError(f"not a Redis URL ({exc}): redis://[:password@]host:port/database") from None
        return v

    @field_validator("ocr_languages")
    @classmethod
    def _tesseract_languages(cls, v: str) -> str:
        if not all(part.replace("_", "").isalpha() for part in v.split("+")):
            raise ValueError("language codes of Tesseract joined by +, e.g. fra+eng")
        return v

    @field_validator("state_dir", "approval_policy_file")
    @classmethod
    def _anchored(cls, v: Path) -> Path:
        return v if v.is_absolute() else ROOT / v

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

    def fleet_files(self) -> list[Path]:
        """What nothing the agent wrote may read (SPEC §13): the fleet's code (the checkout,
        `.env` with it), its state directory, and every configuration or key file it names.
        Sandboxes deny these by path, on top of the file modes."""
        named = (self.state_dir, self.attachments_dir, self.mailboxes_file, self.dkim_keys_file,
                 self.approval_policy_file, self.ai_keys_dir, self.flower_auth_file)
        paths = [ROOT, ROOT / ".env", *(p for p in named if p is not None)]
        return list(dict.fromkeys(Path(os.path.abspath(p)) for p in paths))


@lru_cache
def get_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError("; ".join(_explain(e) for e in exc.errors())) from None


def _explain(error: object) -> str:
    """`SYNEDRE_X='value': what it accepts`, the value left out for a secret or a URL."""
    e = dict(error)  # type: ignore[call-overload]
    name = str(e["loc"][0]) if e["loc"] else ""
    field = Settings.model_fields.get(name)
    var = str(field.validation_alias) if field and field.validation_alias else f"SYNEDRE_{name.upper()}"
    secret = name.endswith(("_url", "_key", "_auth")) or (field is not None and "SecretStr" in str(field.annotation))
    value = "" if secret or e["type"] == "missing" else f"={e['input']!r}"
    why = str(e["msg"]).removeprefix("Value error, ").removeprefix(f"{var} ")
    return f"{var}{value}: {why[:1].lower() if why[1:2].islower() else why[:1]}{why[1:]}"


# SYNEDRE_* variables that are not settings but are read elsewhere: by compose's entrypoint
# (compose/entrypoint.sh), by the agent (its environment), by the tests and benchmarks.
OTHER_VARIABLES = frozenset({
    "SYNEDRE_DATABASE_PASSWORD_FILE", "SYNEDRE_BROKER_PASSWORD_FILE", "SYNEDRE_SECRET_ENV_DIR",
    "SYNEDRE_CONTRACT_PATH", "SYNEDRE_WORKER_CONTEXT", "SYNEDRE_RUN_TOKEN",
    "SYNEDRE_TEST_REDIS_URL", "SYNEDRE_TEST_SHARED_PG_URL", "SYNEDRE_LOCKS_TEST_REDIS_URL", "SYNEDRE_BENCH_REDIS_URL"})


def variable_names() -> list[str]:
    """Every setting's variable, as the Configuration table names it."""
    return [str(f.validation_alias or f"SYNEDRE_{n.upper()}") for n, f in Settings.model_fields.items()]


def unknown_variables(environ: dict[str, str] | None = None, env_file: Path | None = ROOT / ".env") -> list[str]:
    """One warning per SYNEDRE_* variable of the environment or of `.env` that no setting
    reads (a typo would otherwise be ignored in silence), naming the closest known one."""
    from dotenv import dotenv_values

    known = variable_names()
    bare = {k.removeprefix("SYNEDRE_"): k for k in known}
    found = {name: "" for name in (os.environ if environ is None else environ)}
    if env_file is not None and env_file.is_file():
        found |= {name: f" ({env_file})" for name in dotenv_values(env_file) if name not in found}
    out = []
    for name, where in sorted(found.items()):
        if not name.upper().startswith("SYNEDRE_") or name.upper() in known or name.upper() in OTHER_VARIABLES:
            continue
        # compared without the prefix every name shares, which would make anything look close
        close = difflib.get_close_matches(name.upper().removeprefix("SYNEDRE_"), list(bare), n=1)
        out.append(f"{name}{where} is not a setting" + (f": did you mean {bare[close[0]]}?" if close else
                                                           " (the README's Configuration lists them)"))
    return out


def secret_from_env(name: str) -> str | None:
    """A secret referenced by the *name* of its variable (e.g. a mailbox's password_env)."""
    return os.environ.get(name) or None
