"""A mailbox's `[mailboxes.<id>.oauth2]` table (`OAuth2`), checked whole when the registry is
read, and the endpoints and scopes it stands for (Google's and Microsoft's presets, or a
custom provider's own)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

# Microsoft tenants that name no organisation: app-only access needs a real tenant id.
MS_GENERIC_TENANTS = ("common", "organizations", "consumers")


@dataclass(frozen=True)
class Endpoints:
    token_url: str
    authorization_url: str | None
    device_authorization_url: str | None
    scopes: tuple[str, ...]
    # extra parameters of the authorization request (a refresh token from Google needs both)
    authorization_params: tuple[tuple[str, str], ...] = ()


MS = "https://login.microsoftonline.com/{tenant}/oauth2/v2.0"
GOOGLE_SCOPES = ("https://mail.google.com/",)
MS_SCOPES = ("https://outlook.office.com/IMAP.AccessAsUser.All", "https://outlook.office.com/SMTP.Send",
             "offline_access")
MS_APP_SCOPES = ("https://outlook.office365.com/.default",)


class OAuth2(BaseModel):
    """The `[mailboxes.<id>.oauth2]` table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal["google", "microsoft", "custom"]
    client_id: str
    client_secret_env: str | None = None
    client_secret_file: Path | None = None
    refresh_token_env: str | None = None
    refresh_token_file: Path | None = None
    # Microsoft 365's app-only access (client credentials): no user, no refresh token.
    app_only: bool = False
    tenant: str | None = None  # microsoft: a tenant id or domain (default `organizations`)
    scopes: list[str] | None = None  # the preset's when unset; required for custom
    token_url: str | None = None  # custom only, as the two below
    authorization_url: str | None = None
    device_authorization_url: str | None = None

    @model_validator(mode="after")
    def _coherent(self) -> OAuth2:
        if self.client_secret_env and self.client_secret_file:
            raise ValueError("client_secret_env and client_secret_file are exclusive: name one")
        if self.refresh_token_env and self.refresh_token_file:
            raise ValueError("refresh_token_env and refresh_token_file are exclusive: name one")
        custom_only = [k for k in ("token_url", "authorization_url", "device_authorization_url")
                       if getattr(self, k) is not None]
        if self.provider != "custom" and custom_only:
            raise ValueError(f"{custom_only[0]} is for provider = \"custom\"; {self.provider}'s endpoints are"
                             " built in")
        if self.provider == "custom" and (not self.token_url or not self.scopes):
            raise ValueError("provider = \"custom\" needs token_url and scopes")
        if self.tenant is not None and self.provider != "microsoft":
            raise ValueError("tenant is for provider = \"microsoft\"")
        if self.app_only:
            if self.provider == "google":
                raise ValueError("app_only is Microsoft 365's client-credentials access; Google has none for mail")
            if self.refresh_token_env or self.refresh_token_file:
                raise ValueError("app_only uses no refresh token: drop refresh_token_env/refresh_token_file")
            if not self.has_secret:
                raise ValueError("app_only needs the client secret: client_secret_env or client_secret_file")
            if self.provider == "microsoft" and (self.tenant or "organizations") in MS_GENERIC_TENANTS:
                raise ValueError("app_only needs tenant = your Entra tenant id (or its domain)")
        elif not (self.refresh_token_env or self.refresh_token_file):
            raise ValueError("name where the refresh token is: refresh_token_file (which `synedre mailbox"
                             " authorize` writes) or refresh_token_env")
        if self.provider == "google" and not self.has_secret:
            raise ValueError("Google's token endpoint needs the client secret: client_secret_env or"
                             " client_secret_file")
        return self

    @property
    def has_secret(self) -> bool:
        return bool(self.client_secret_env or self.client_secret_file)

    def endpoints(self) -> Endpoints:
        if self.provider == "google":
            return Endpoints("https://oauth2.googleapis.com/token", "https://accounts.google.com/o/oauth2/v2/auth",
                             None, tuple(self.scopes or GOOGLE_SCOPES),
                             (("access_type", "offline"), ("prompt", "consent")))
        if self.provider == "microsoft":
            base = MS.format(tenant=self.tenant or "organizations")
            return Endpoints(f"{base}/token", f"{base}/authorize", f"{base}/devicecode",
                             tuple(self.scopes or (MS_APP_SCOPES if self.app_only else MS_SCOPES)))
        assert self.token_url is not None and self.scopes is not None  # _coherent
        return Endpoints(self.token_url, self.authorization_url, self.device_authorization_url, tuple(self.scopes))

    def references(self) -> list[tuple[Literal["env", "file"], str]]:
        """Where its secrets are: ("env", NAME) or ("file", path)."""
        refs: list[tuple[Literal["env", "file"], str]] = []
        for env, path in ((self.client_secret_env, self.client_secret_file),
                          (self.refresh_token_env, self.refresh_token_file)):
            if env:
                refs.append(("env", env))
            if path:
                refs.append(("file", str(path)))
        return refs
