"""The mailbox registry: mailbox id -> IMAP/SMTP coordinates and the *name* of its secret."""
from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ValidationError

from synedre.config import get_settings, secret_from_env


class RegistryError(RuntimeError):
    pass


class Mailbox(BaseModel, frozen=True):
    id: str
    imap_host: str
    imap_port: int = 993
    imap_tls: bool = True
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_tls: bool = True
    username: str
    password_env: str
    folder: str = "INBOX"

    def password(self) -> str:
        """Resolved at the last moment; never stored, never logged."""
        value = secret_from_env(self.password_env)
        if not value:
            raise RegistryError(
                f"mailbox {self.id!r}: environment variable {self.password_env} is not set")
        return value


def load(path: Path | None = None) -> dict[str, Mailbox]:
    path = path or get_settings().mailboxes_file
    if path is None:
        raise RegistryError(
            "no mailbox configured: set SYNEDRE_MAILBOXES_FILE to a TOML file with a "
            "[mailboxes.atlas] table (see mailboxes.example.toml) and export the variable "
            "named by its password_env")
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RegistryError(f"cannot read mailbox registry {path}: {exc}") from exc
    try:
        return {k: Mailbox(id=k, **v) for k, v in data.get("mailboxes", {}).items()}
    except (TypeError, ValidationError) as exc:
        raise RegistryError(f"invalid mailbox registry {path}: {exc}") from exc


def get(mailbox_id: str) -> Mailbox:
    boxes = load()
    if mailbox_id not in boxes:
        raise RegistryError(f"unknown mailbox {mailbox_id!r} (known: {', '.join(boxes) or 'none'})")
    return boxes[mailbox_id]
