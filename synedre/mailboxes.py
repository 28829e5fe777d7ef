"""The mailbox registry: mailbox id -> IMAP/SMTP coordinates and *where* its secret is (a
password's variable, or OAuth2's client and refresh token), and the one way the fleet logs in
to a mailbox, by IMAP or SMTP.

The registry is checked like the settings: an unknown key, a missing one, a value of the wrong
kind or two ways in at once stop the command in one line naming the file, the table, the key
and what is accepted. A login the server (or the OAuth2 token endpoint) refuses is
`LoginRefused`, one line naming the mailbox, the server and its answer, counted for
`synedre metrics`.
"""
from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, cast

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError, LoginError
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from synedre import oauth
from synedre.config import get_settings, secret_from_env
from synedre.log import log
from synedre.oauth.config import OAuth2

# Redis hash of refused logins, field "<mailbox>|<cause>" (synedre metrics reads it).
FAILURES_KEY = "synedre:mailbox_login_failures"
CAUSES = ("imap", "smtp", "token")


class RegistryError(RuntimeError):
    pass


class LoginRefused(LoginError):
    """The mailbox cannot log in and no quick retry will change it: the server (IMAP, SMTP or
    the OAuth2 token endpoint) answered no, or a secret it needs is missing. The message is
    one line naming the mailbox, the server and its answer."""

    def __init__(self, mailbox: str, line: str, cause: str):
        super().__init__(line)
        self.mailbox, self.cause = mailbox, cause


class Mailbox(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    imap_host: str
    imap_port: int = 993
    imap_tls: bool = True
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_tls: bool = True
    username: str
    auth: Literal["password", "oauth2"] = "password"
    password_env: str | None = None
    oauth2: OAuth2 | None = None
    folder: str = "INBOX"

    @model_validator(mode="after")
    def _one_way_in(self) -> Mailbox:
        if self.password_env and self.oauth2 is not None:
            raise ValueError("password_env and [oauth2] are exclusive: a mailbox logs in one way")
        if self.auth == "oauth2" and self.oauth2 is None:
            raise ValueError(f'auth = "oauth2" needs a [mailboxes.{self.id}.oauth2] table')
        if self.auth == "password" and self.oauth2 is not None:
            raise ValueError('an [oauth2] table needs auth = "oauth2"')
        if self.auth == "password" and not self.password_env:
            raise ValueError('missing key password_env (or auth = "oauth2" with an [oauth2] table)')
        return self

    @property
    def imap_server(self) -> str:
        return f"IMAP {self.imap_host}:{self.imap_port}"

    @property
    def smtp_server(self) -> str:
        return f"SMTP {self.smtp_host}:{self.smtp_port}"

    def password(self) -> str:
        """Resolved at the last moment; never stored, never logged."""
        value = secret_from_env(self.password_env) if self.password_env else None
        if not value:
            raise RegistryError(
                f"mailbox {self.id!r}: environment variable {self.password_env} is not set")
        return value

    def check_secrets(self) -> None:
        """Every secret it names can be read (the fleet's start): RegistryError saying which."""
        if self.oauth2 is None:
            self.password()
            return
        try:
            oauth.client_secret(self.oauth2)
            if not self.oauth2.app_only:
                oauth.refresh_token(self.oauth2)
        except oauth.SecretMissing as exc:
            raise RegistryError(f"mailbox {self.id}: {exc}{self._authorize_hint(exc)}") from None

    def references(self) -> list[tuple[Literal["env", "file"], str]]:
        """Where its secrets are, for the redactor: ("env", NAME) or ("file", path)."""
        if self.oauth2 is not None:
            return self.oauth2.references()
        return [("env", self.password_env)] if self.password_env else []

    # -- logging in ---------------------------------------------------------------------------

    def access_token(self, *, fresh: bool = False, stale: str | None = None) -> str:
        """The OAuth2 access token to log in with (refreshed before it expires); LoginRefused
        when the token endpoint refuses or a secret is missing."""
        assert self.oauth2 is not None
        try:
            return oauth.tokens.get(self._token_key, self.oauth2, fresh=fresh, stale=stale)
        except oauth.TokenRefused as exc:
            # what that grant gave is dead too: the next attempt asks the endpoint, not the server
            oauth.tokens.forget(self._token_key)
            raise self._refused(exc.server, exc.answer, "token",
                                f": run `synedre mailbox authorize {self.id}`"
                                if not self.oauth2.app_only else ": check the Entra application") from None
        except oauth.SecretMissing as exc:
            raise self._refused("the registry", str(exc), "token", self._authorize_hint(exc)) from None

    def login(self, client: IMAPClient) -> None:
        """Log `client` in: LOGIN with the password, or XOAUTH2 with the access token, tried
        once more with a new token when the server refuses the one held (it may have been
        revoked, or have expired early). LoginRefused when the server still says no."""
        if self.oauth2 is None:
            self._imap_attempt(lambda: client.login(self.username, self.password()),
                               f"check the password in {self.password_env}")
            return
        token = self.access_token()
        try:
            client.oauth2_login(self.username, token)
            return
        except LoginError as exc:
            if _unavailable(exc):
                raise
            log.info("mailbox_token_refused_once", mailbox=self.id, server=self.imap_server)
        fresh = self.access_token(fresh=True, stale=token)
        self._imap_attempt(lambda: client.oauth2_login(self.username, fresh),
                           "the server refused a fresh access token: check the account's IMAP access and scopes")

    def _imap_attempt(self, attempt: Callable[[], Any], hint: str) -> None:
        try:
            attempt()
        except LoginError as exc:
            if _unavailable(exc):  # RFC 5530: the auth backend is down for a while
                raise
            raise self._refused(self.imap_server, server_answer(exc), "imap", f" ({hint})") from None

    def smtp_login(self, smtp: Any) -> None:
        """AUTH on an open smtplib session (after EHLO and STARTTLS): LOGIN/PLAIN with the
        password, or XOAUTH2, once more with a new token when refused. LoginRefused when the
        server still refuses."""
        import smtplib

        if self.oauth2 is None:
            try:
                smtp.login(self.username, self.password())
            except smtplib.SMTPAuthenticationError as exc:
                if exc.smtp_code < 500:  # 454: a temporary failure, the caller retries
                    raise
                raise self._refused(self.smtp_server, _smtp_answer(exc), "smtp",
                                    f" (check the password in {self.password_env})") from None
            return
        if not smtp.has_extn("auth") or "XOAUTH2" not in smtp.esmtp_features.get("auth", "").upper().split():
            raise self._refused(self.smtp_server, "it offers no AUTH XOAUTH2", "smtp",
                                " (check smtp_host and smtp_port)")
        token = self.access_token()
        for attempt in (1, 2):
            try:
                smtp.auth("XOAUTH2", _XOAuth2(self.username, token), initial_response_ok=True)
                return
            except smtplib.SMTPAuthenticationError as exc:
                if exc.smtp_code < 500:  # 454: a temporary failure, the caller retries
                    raise
                if attempt == 2:
                    raise self._refused(self.smtp_server, _smtp_answer(exc), "smtp",
                                        " (check the account's SMTP AUTH permission and scopes)") from None
                token = self.access_token(fresh=True, stale=token)

    def _refused(self, server: str, answer: str, cause: str, hint: str = "") -> LoginRefused:
        line = f"mailbox {self.id}: {server} refused the login of {self.username}: {answer}{hint}"
        record_refusal(self.id, cause)
        if self.oauth2 is not None and cause != "token":
            oauth.tokens.forget(self._token_key)  # the next attempt starts from a new token
        return LoginRefused(self.id, line, cause)

    def _authorize_hint(self, exc: Exception) -> str:
        if self.oauth2 is not None and "refresh token" in str(exc) and self.oauth2.refresh_token_file:
            return f": run `synedre mailbox authorize {self.id}`"
        return ""

    @property
    def _token_key(self) -> str:
        # a changed client or refresh token source is another token
        return f"{self.id}|{self.oauth2.model_dump_json() if self.oauth2 else ''}"

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
            self.login(client)
            yield client
        finally:
            try:
                client.logout()
            except (IMAPClientError, OSError):  # the connection may already be gone; nothing to save
                pass


class _XOAuth2:
    """smtplib's authobject: the initial response, then an empty line to an error challenge
    (RFC 7628 §3.2.3: the server then answers 535)."""

    def __init__(self, user: str, token: str):
        self._initial = oauth.xoauth2(user, token)

    def __call__(self, challenge: bytes | None = None) -> str:
        return self._initial if challenge is None else ""


def _unavailable(exc: Exception) -> bool:
    return "UNAVAILABLE" in str(exc)


def server_answer(exc: Exception) -> str:
    """The server's words from an imaplib/imapclient error: `b'[X] y'` becomes `[X] y`."""
    text = str(exc).strip()
    if text[:2] in ("b'", 'b"') and text[-1:] == text[1]:
        text = text[2:-1]
    return " ".join(text.split())[:300] or type(exc).__name__


def _smtp_answer(exc: Any) -> str:
    msg = exc.smtp_error
    text = msg.decode(errors="replace") if isinstance(msg, bytes) else str(msg)
    return " ".join(f"{exc.smtp_code} {text}".split())[:300]


def record_refusal(mailbox: str, cause: str) -> None:
    """Count it for `synedre metrics` (synedre_mailbox_login_failures_total); Redis down only
    costs the count."""
    from synedre import kv

    try:
        kv.client().hincrby(FAILURES_KEY, f"{mailbox}|{cause}", 1)
    except Exception as exc:  # the refusal itself is what matters: it is raised all the same
        log.warning("mailbox_failure_uncounted", mailbox=mailbox, error=type(exc).__name__)


def refusals() -> dict[tuple[str, str], int]:
    """Refused logins so far, per (mailbox, cause)."""
    from synedre import kv

    out = {}
    counts = cast(dict[Any, Any], kv.client().hgetall(FAILURES_KEY))  # a sync client: the reply itself
    for field, n in counts.items():
        box, _, cause = (field.decode() if isinstance(field, bytes) else field).rpartition("|")
        out[(box, cause)] = int(n)
    return out


# -- the registry ----------------------------------------------------------------------------

_TOP = ("mailboxes",)


def _accepted(model: type[BaseModel]) -> str:
    return ", ".join(k for k in model.model_fields if k != "id")


def _explain(path: Path, box_id: str, error: Any) -> str:
    loc = [str(p) for p in error["loc"]]
    nested = bool(loc) and loc[0] == "oauth2" and (len(loc) > 1 or error["type"] == "value_error")
    table = f"[mailboxes.{box_id}.oauth2]" if nested else f"[mailboxes.{box_id}]"
    model: type[BaseModel] = OAuth2 if nested else Mailbox
    key = ".".join(loc[1:] if nested else loc)
    kind, msg = error["type"], str(error["msg"]).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        why = f"unknown key {key} (accepted: {_accepted(model)})"
    elif kind == "missing":
        why = f"missing key {key}"
    elif key:
        why = f"{key} = {error['input']!r}: {msg}"
    else:
        why = msg
    return f"mailbox registry {path}: {table} {why}"


def load(path: Path | None = None) -> dict[str, Mailbox]:
    path = path or get_settings().mailboxes_file
    if path is None:
        raise RegistryError(
            "no mailbox configured: set SYNEDRE_MAILBOXES_FILE to a TOML file with a "
            "[mailboxes.atlas] table (see mailboxes.example.toml) and export the variable "
            "named by its password_env")
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RegistryError(f"cannot read mailbox registry {path}: {' '.join(str(exc).split())}") from exc
    for key in data:
        if key not in _TOP:
            raise RegistryError(f"mailbox registry {path}: unknown key {key} (accepted: one [mailboxes.<id>]"
                                " table per mailbox)")
    tables = data.get("mailboxes", {})
    if not isinstance(tables, dict):
        raise RegistryError(f"mailbox registry {path}: mailboxes must be tables ([mailboxes.<id>])")
    boxes = {}
    for box_id, table in tables.items():
        if not isinstance(table, dict):
            raise RegistryError(f"mailbox registry {path}: mailboxes.{box_id} must be a table ([mailboxes.{box_id}])")
        if "id" in table:
            raise RegistryError(f"mailbox registry {path}: [mailboxes.{box_id}] unknown key id (the table's"
                                f" name is the id; accepted: {_accepted(Mailbox)})")
        try:
            boxes[box_id] = Mailbox(id=box_id, **table)
        except ValidationError as exc:
            raise RegistryError("; ".join(_explain(Path(path), box_id, e) for e in exc.errors())) from None
    return boxes


def get(mailbox_id: str) -> Mailbox:
    boxes = load()
    if mailbox_id not in boxes:
        raise RegistryError(f"unknown mailbox {mailbox_id!r} (known: {', '.join(boxes) or 'none'})")
    return boxes[mailbox_id]
