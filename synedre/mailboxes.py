"""The mailbox registry: mailbox id -> IMAP/SMTP coordinates and the *name* of its secret,
and the one way the fleet opens an IMAP connection to a mailbox."""
from __future__ import annotations

import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError
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

    def client(self, timeout_s: float | None = None) -> IMAPClient:
        """A connected (not yet logged-in) client; every call bounded by the timeout
        (SYNEDRE_IMAP_TIMEOUT_S unless given)."""
        return IMAPClient(self.imap_host, port=self.imap_port, ssl=self.imap_tls,
                          timeout=timeout_s or get_settings().imap_timeout_s)

    @contextmanager
    def session(self, timeout_s: float | None = None) -> Iterator[IMAPClient]:
        """A logged-in client, logged out (if the connection still stands) on the way out."""
        client = self.client(timeout_s)
        try:
            client.login(self.username, self.password())
            yield client
        finally:
            try:
                client.logout()
            except (IMAPClientError, OSError):  # the connection may already be gone; nothing to save
                pass


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
