"""OAuth2 for mailboxes: a registry entry's `[mailboxes.<id>.oauth2]` table (`config.OAuth2`),
the access token the mailbox logs in with (XOAUTH2, for IMAP and SMTP), and the flows
`synedre mailbox authorize` runs to obtain a refresh token.

One generic client (authlib's, over requests) speaks RFC 6749 (refresh token, authorization
code, client credentials), RFC 7636 (PKCE) and RFC 8628 (device authorization) to any
provider: Google and Microsoft are presets of endpoints and scopes, `custom` names its own.

Secrets are referenced by name — an environment variable (`*_env`) or a file (`*_file`) —
and read at the moment they are used. The access token lives in this process's memory only,
refreshed `refresh margin` before it expires (`REFRESH_MARGIN_S`, at most half its lifetime)
and again when a server refuses it; it is never written anywhere. A refresh token a provider
rotates is written back to its file (0600), never elsewhere.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synedre.config import secret_from_env
from synedre.log import log
from synedre.oauth.config import OAuth2

# A token is renewed this long before it expires (or at half its lifetime when shorter), so
# no login is attempted with one about to lapse mid-handshake.
REFRESH_MARGIN_S = 300.0
# Each request to a token or device endpoint, connect to answer.
HTTP_TIMEOUT_S = 20.0
# The redirect URI of the pasted-code flow: a loopback address nothing listens on, so the
# browser stops there with the code in its address bar, to be pasted back (Google's and
# Microsoft's desktop clients accept any loopback port).
PASTE_REDIRECT_URI = "http://localhost:1/"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# Access tokens held recently by this process, per mailbox, kept for the redactor.
_HELD_PER_MAILBOX = 4


# -- errors ------------------------------------------------------------------------------

class TokenRefused(Exception):
    """The token endpoint answered and said no (a revoked refresh token, a wrong client
    secret): retrying soon changes nothing."""

    def __init__(self, server: str, answer: str, error: str | None = None):
        super().__init__(f"{server} refused: {answer}")
        self.server, self.answer, self.error = server, answer, error


class SecretMissing(Exception):
    """A secret the registry names cannot be read (a variable unset, a file absent)."""


class TokenUnavailable(ConnectionError):
    """The token endpoint did not answer (network, timeout, a 5xx): transient."""


# -- reading and writing the named secrets -------------------------------------------------

def read_named(env: str | None, path: Path | None, what: str) -> str | None:
    """The secret from its variable or file; None when neither is named; SecretMissing when
    named but empty or unreadable (the message names where, never the value)."""
    # "<what> file …", never "<what>: …", which the redactor would take for a secret's value
    if env:
        value = secret_from_env(env)
        if not value:
            raise SecretMissing(f"{what} variable {env} is not set")
        return value.strip()
    if path:
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise SecretMissing(f"{what} file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SecretMissing(f"{what} file {path} is unreadable ({type(exc).__name__})") from None
        if not value:
            raise SecretMissing(f"{what} file {path} is empty")
        return value
    return None


def client_secret(cfg: OAuth2) -> str | None:
    return read_named(cfg.client_secret_env, cfg.client_secret_file, "the client secret")


def refresh_token(cfg: OAuth2) -> str:
    value = read_named(cfg.refresh_token_env, cfg.refresh_token_file, "the refresh token")
    assert value is not None  # _coherent: one of the two is named unless app_only
    return value


def store_refresh_token(path: Path, value: str) -> None:
    """Write the refresh token to `path`, mode 0600 from its creation, replaced atomically so
    a reader sees the old token or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(value + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- the token endpoint ----------------------------------------------------------------------

def session(cfg: OAuth2, secret: str | None, **kw: Any) -> Any:
    from authlib.integrations.requests_client import OAuth2Session

    return OAuth2Session(cfg.client_id, secret, scope=" ".join(cfg.endpoints().scopes),
                         token_endpoint_auth_method="client_secret_post" if secret else "none", **kw)


def _answer(exc: Exception) -> str:
    error, description = getattr(exc, "error", None), getattr(exc, "description", None)
    if error:
        return f"{error} ({description})" if description else str(error)
    return " ".join(str(exc).split())[:300]


def request_token(cfg: OAuth2, call: Any) -> dict[str, Any]:
    """Run `call(session, token_url)` against the token endpoint; its token, or TokenRefused /
    TokenUnavailable said with the endpoint and its answer."""
    import requests
    from authlib.integrations.base_client import OAuthError

    url = cfg.endpoints().token_url
    secret = client_secret(cfg)
    try:
        with session(cfg, secret) as s:
            token = dict(call(s, url))
    except OAuthError as exc:
        raise TokenRefused(f"the OAuth2 token endpoint {url}", _answer(exc), exc.error) from None
    except requests.HTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status >= 500 or status == 429:
            raise TokenUnavailable(f"the OAuth2 token endpoint {url} answered HTTP {status}") from None
        raise TokenRefused(f"the OAuth2 token endpoint {url}", f"HTTP {status}") from None
    except (requests.RequestException, ValueError) as exc:  # ValueError: not a JSON object
        raise TokenUnavailable(f"the OAuth2 token endpoint {url} did not answer ({type(exc).__name__})") from None
    if not token.get("access_token"):
        raise TokenRefused(f"the OAuth2 token endpoint {url}", "no access_token in its answer")
    return token


def grant(cfg: OAuth2) -> dict[str, Any]:
    """A new access token: client credentials for app-only access, else the refresh token."""
    if cfg.app_only:
        return request_token(cfg, lambda s, url: s.fetch_token(url, grant_type="client_credentials",
                                                               timeout=HTTP_TIMEOUT_S))
    held = refresh_token(cfg)
    token = request_token(cfg, lambda s, url: s.refresh_token(url, refresh_token=held, timeout=HTTP_TIMEOUT_S))
    rotated = token.get("refresh_token")
    if rotated and rotated != held and cfg.refresh_token_file:
        try:  # the provider rotated it: keep the new one
            store_refresh_token(cfg.refresh_token_file, rotated)
        except OSError as exc:  # a read-only mount: the held one stays valid until it expires
            log.warning("oauth_refresh_token_not_rewritten", file=str(cfg.refresh_token_file),
                        error=type(exc).__name__)
    return token


# -- the access token this process holds -----------------------------------------------------

@dataclass
class _Held:
    token: str
    renew_at: float  # monotonic


class TokenCache:
    """Per mailbox, the access token in use and when to renew it; one refresh at a time per
    mailbox (the watcher, a poll and a send may ask at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._held: dict[str, _Held] = {}
        self._recent: dict[str, deque[str]] = {}
        self.generation = 0  # bumped at each new token: the redactor gathers again

    def get(self, key: str, cfg: OAuth2, *, fresh: bool = False, stale: str | None = None) -> str:
        """The access token for `key`; `fresh` asks for a new one unless the one held is no
        longer `stale` (another thread already renewed it)."""
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            held = self._held.get(key)
            if held is not None and time.monotonic() < held.renew_at:
                if not fresh or (stale is not None and held.token != stale):
                    return held.token
            token = grant(cfg)
            lifetime = float(token.get("expires_in") or 3600)
            value = str(token["access_token"])
            with self._lock:
                self._held[key] = _Held(value, time.monotonic() + lifetime - min(REFRESH_MARGIN_S, lifetime / 2))
                self._recent.setdefault(key, deque(maxlen=_HELD_PER_MAILBOX)).append(value)
                self.generation += 1
            return value

    def forget(self, key: str) -> None:
        with self._lock:
            self._held.pop(key, None)

    def values(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(v for d in self._recent.values() for v in d)


tokens = TokenCache()


def xoauth2(user: str, access_token: str) -> str:
    """The XOAUTH2 initial client response (before base64), as Google and Microsoft define it."""
    return f"user={user}\x01auth=Bearer {access_token}\x01\x01"


# -- obtaining the refresh token (`synedre mailbox authorize`) ------------------------------

class AuthorizeError(Exception):
    """The flow could not give a refresh token: said in one line (the user refused, the code
    expired, the provider has no such flow)."""


@dataclass(frozen=True)
class DeviceCode:
    device_code: str
    user_code: str
    verification_uri: str
    expires_in: float
    interval: float


def start_device(cfg: OAuth2) -> DeviceCode:
    """RFC 8628 §3.1: ask the device authorization endpoint for a user code."""
    import requests

    url = cfg.endpoints().device_authorization_url
    if not url:
        raise AuthorizeError(f"provider {cfg.provider} has no device authorization endpoint here: use --flow code")
    secret = client_secret(cfg)
    data = {"client_id": cfg.client_id, "scope": " ".join(cfg.endpoints().scopes),
            **({"client_secret": secret} if secret else {})}
    try:
        resp = requests.post(url, data=data, headers={"Accept": "application/json"}, timeout=HTTP_TIMEOUT_S)
        body = resp.json()
    except (requests.RequestException, ValueError) as exc:
        raise TokenUnavailable(f"the device authorization endpoint {url} did not answer ({type(exc).__name__})") \
            from None
    if resp.status_code != 200 or "device_code" not in body:
        raise AuthorizeError(f"the device authorization endpoint {url} refused: "
                             f"{body.get('error', resp.status_code)} ({body.get('error_description', '')})")
    return DeviceCode(body["device_code"], body["user_code"],
                      body.get("verification_uri") or body.get("verification_url", ""),
                      float(body.get("expires_in", 900)), float(body.get("interval", 5)))


def poll_device(cfg: OAuth2, code: DeviceCode, sleep: Any = time.sleep) -> dict[str, Any]:
    """RFC 8628 §3.4-3.5: ask the token endpoint every `interval` until the user has approved
    (or refused, or the code expired); `slow_down` adds 5 s to the interval."""
    interval, deadline = code.interval, time.monotonic() + code.expires_in
    while time.monotonic() < deadline:
        sleep(interval)
        try:
            return request_token(cfg, lambda s, url: s.fetch_token(url, grant_type=DEVICE_GRANT,
                                                                   device_code=code.device_code,
                                                                   timeout=HTTP_TIMEOUT_S))
        except TokenRefused as exc:
            if exc.error == "authorization_pending":
                continue
            if exc.error == "slow_down":
                interval += 5
                continue
            if exc.error == "access_denied":
                raise AuthorizeError("access was refused on the verification page: nothing stored") from None
            if exc.error == "expired_token":
                break
            raise
    raise AuthorizeError("the code expired before it was entered: run the command again")


@dataclass(frozen=True)
class CodeRequest:
    url: str
    state: str
    verifier: str


def authorization_request(cfg: OAuth2) -> CodeRequest:
    """RFC 6749 §4.1.1 with PKCE (RFC 7636, S256): the address to open in a browser."""
    from authlib.common.security import generate_token

    ep = cfg.endpoints()
    if not ep.authorization_url:
        raise AuthorizeError(f"provider {cfg.provider} has no authorization endpoint here: use --flow device")
    verifier = generate_token(64)
    with session(cfg, None, redirect_uri=PASTE_REDIRECT_URI, code_challenge_method="S256") as s:
        url, state = s.create_authorization_url(ep.authorization_url, code_verifier=verifier,
                                                **dict(ep.authorization_params))
    return CodeRequest(url, state, verifier)


def exchange_code(cfg: OAuth2, request: CodeRequest, pasted: str) -> dict[str, Any]:
    """The pasted answer (the whole address the browser was sent to, or the code alone) for
    tokens; the state must match when the address carries one."""
    from urllib.parse import parse_qs, urlsplit

    pasted = pasted.strip()
    if "code=" in pasted or "error=" in pasted:
        query = {k: v[0] for k, v in parse_qs(urlsplit(pasted).query).items()}
        if "error" in query:
            raise AuthorizeError(f"the provider answered {query['error']} ({query.get('error_description', '')}):"
                                 " nothing stored")
        if query.get("state") != request.state:
            raise AuthorizeError("the pasted address is not the answer to this request (its state differs):"
                                 " run the command again")
        code = query.get("code", "")
    else:
        code = pasted
    if not code:
        raise AuthorizeError("nothing pasted: run the command again")
    return request_token(cfg, lambda s, url: s.fetch_token(url, code=code, code_verifier=request.verifier,
                                                           redirect_uri=PASTE_REDIRECT_URI,
                                                           timeout=HTTP_TIMEOUT_S))
