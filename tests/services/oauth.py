"""A scripted OAuth2 authorization server on loopback, speaking the real HTTP protocol:

- `POST /token` (RFC 6749 §3.2): the `refresh_token`, `authorization_code` (with PKCE,
  RFC 7636), `urn:ietf:params:oauth:grant-type:device_code` (RFC 8628 §3.4) and
  `client_credentials` grants; client authentication by HTTP Basic or in the body; errors
  as RFC 6749 §5.2 JSON (`invalid_grant`, `invalid_client`, `authorization_pending`…);
- `POST /introspect` (RFC 7662), which Dovecot's `oauth2` passdb asks (`introspection_mode
  = post`): `{"active": true, "username": …}` while an access token is live;
- `POST /device` (RFC 8628 §3.1): a device code and a user code;
- `GET /authorize` (RFC 6749 §4.1.1): the consent page a browser would show, here approved at
  once: a 302 to the redirect URI with the code and the state.

The test plays the user: `approve(user_code)` is the click on the verification page. It also
plays the provider's operator: `revoke_refresh`, `expire_access`. Every token issued is kept
(`issued()`), so a test can look for each one where it must not be.
"""
from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@dataclass
class _Access:
    user: str
    expires_at: float
    revoked: bool = False


@dataclass
class _Device:
    user: str
    user_code: str
    expires_at: float
    approved: bool = False
    denied: bool = False
    polls: int = 0


@dataclass
class OAuthServer:
    client_id: str
    client_secret: str
    user: str
    access_ttl_s: float = 3600.0
    device_interval_s: int = 1
    rotate: bool = False  # each refresh answers a new refresh token and revokes the one used
    host: str = "127.0.0.1"
    port: int = 0
    # what happened, for the tests to assert on
    grants: list[str] = field(default_factory=list)          # grant_type of each token request
    introspected: list[str] = field(default_factory=list)    # each token Dovecot asked about
    refused: list[str] = field(default_factory=list)         # error codes answered
    _refresh: dict[str, bool] = field(default_factory=dict)  # refresh token -> live
    _access: dict[str, _Access] = field(default_factory=dict)
    _codes: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # code -> (redirect, challenge, user)
    _devices: dict[str, _Device] = field(default_factory=dict)  # device code -> state
    _secrets: list[str] = field(default_factory=list)  # every token and code issued
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- what the test does as the user or the provider's operator ------------------------
    def new_refresh_token(self) -> str:
        """A refresh token as an earlier consent would have left (for the fleet's file)."""
        with self._lock:
            return self._issue_refresh()

    def approve(self, user_code: str) -> None:
        with self._lock:
            device = next(d for d in self._devices.values() if d.user_code == user_code)
            device.approved = True

    def revoke_refresh(self, token: str | None = None) -> None:
        """Revoke one refresh token (or all) and every access token: what a user removing the
        app's access, or an administrator, does."""
        with self._lock:
            for t in list(self._refresh):
                if token is None or t == token:
                    self._refresh[t] = False
            for a in self._access.values():
                a.revoked = True

    def expire_access(self) -> None:
        """Every access token issued so far stops being accepted, as at its expiry."""
        with self._lock:
            for a in self._access.values():
                a.revoked = True

    def live_refresh_tokens(self) -> list[str]:
        with self._lock:
            return [t for t, live in self._refresh.items() if live]

    def issued(self) -> list[str]:
        """Every token and code this server ever issued, and the client secret."""
        with self._lock:
            return [self.client_secret, *self._secrets]

    def count(self, grant: str) -> int:
        with self._lock:
            return self.grants.count(grant)

    # -- the protocol -----------------------------------------------------------------------
    def _issue_refresh(self) -> str:
        token = "rt-" + secrets.token_urlsafe(24)
        self._refresh[token] = True
        self._secrets.append(token)
        return token

    def _issue_access(self) -> dict[str, Any]:
        token = "at-" + secrets.token_urlsafe(24)
        self._access[token] = _Access(self.user, time.time() + self.access_ttl_s)
        self._secrets.append(token)
        return {"access_token": token, "token_type": "Bearer", "expires_in": int(self.access_ttl_s)
                if self.access_ttl_s >= 1 else 1}

    def _client_ok(self, headers: Any, form: dict[str, str], secret_required: bool) -> bool:
        auth = headers.get("Authorization", "")
        if auth.startswith("Basic "):
            cid, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        else:
            cid, secret = form.get("client_id", ""), form.get("client_secret", "")
        if cid != self.client_id:
            return False
        return secret == self.client_secret or (not secret_required and not secret)

    def token(self, headers: Any, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        grant = form.get("grant_type", "")
        with self._lock:
            self.grants.append(grant)
            # a public client (the device flow of an app without a secret) sends none
            if not self._client_ok(headers, form, secret_required=grant not in (DEVICE_GRANT,)):
                return self._error(401, "invalid_client", "client authentication failed")
            if grant == "refresh_token":
                if not self._refresh.get(form.get("refresh_token", "")):
                    return self._error(400, "invalid_grant", "Token has been expired or revoked.")
                if self.rotate:
                    self._refresh[form["refresh_token"]] = False
                    return 200, {**self._issue_access(), "refresh_token": self._issue_refresh()}
                return 200, self._issue_access()
            if grant == "client_credentials":
                return 200, {**self._issue_access(), "scope": form.get("scope", "")}
            if grant == "authorization_code":
                found = self._codes.pop(form.get("code", ""), None)
                if found is None or found[0] != form.get("redirect_uri"):
                    return self._error(400, "invalid_grant", "Malformed auth code.")
                challenge = base64.urlsafe_b64encode(
                    hashlib.sha256(form.get("code_verifier", "").encode()).digest()).rstrip(b"=").decode()
                if challenge != found[1]:
                    return self._error(400, "invalid_grant", "code_verifier does not match")
                return 200, {**self._issue_access(), "refresh_token": self._issue_refresh()}
            if grant == DEVICE_GRANT:
                device = self._devices.get(form.get("device_code", ""))
                if device is None or time.time() > device.expires_at:
                    return self._error(400, "expired_token", "the device code expired")
                device.polls += 1
                if device.denied:
                    return self._error(400, "access_denied", "the user refused")
                if not device.approved:
                    return self._error(400, "authorization_pending", "waiting for the user")
                del self._devices[form["device_code"]]
                return 200, {**self._issue_access(), "refresh_token": self._issue_refresh()}
            return self._error(400, "unsupported_grant_type", grant)

    def _error(self, status: int, error: str, description: str) -> tuple[int, dict[str, Any]]:
        self.refused.append(error)
        return status, {"error": error, "error_description": description}

    def introspect(self, form: dict[str, str]) -> dict[str, Any]:
        token = form.get("token", "")
        with self._lock:
            self.introspected.append(token)
            a = self._access.get(token)
            if a is None or a.revoked or time.time() >= a.expires_at:
                return {"active": False}
            return {"active": True, "username": a.user, "exp": int(a.expires_at), "client_id": self.client_id}

    def device(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if form.get("client_id") != self.client_id:
                return self._error(401, "invalid_client", "unknown client")
            device_code = "dc-" + secrets.token_urlsafe(24)
            user_code = "-".join(secrets.token_hex(2).upper() for _ in range(2))
            self._devices[device_code] = _Device(self.user, user_code, time.time() + 600)
            self._secrets.append(device_code)
        return 200, {"device_code": device_code, "user_code": user_code,
                     "verification_uri": f"{self.url}/device/verify", "expires_in": 600,
                     "interval": self.device_interval_s}

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str]]:
        if query.get("client_id") != self.client_id or query.get("response_type") != "code":
            return 400, {}
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            return 400, {}
        code = "ac-" + secrets.token_urlsafe(16)
        with self._lock:
            self._codes[code] = (query["redirect_uri"], query["code_challenge"], self.user)
            self._secrets.append(code)
        sep = "&" if "?" in query["redirect_uri"] else "?"
        return 302, {"Location": f"{query['redirect_uri']}{sep}{urlencode({'code': code, 'state': query['state']})}"}

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def _handler(oauth: OAuthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet: the tests read the server's state
            pass

        def _form(self) -> dict[str, str]:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            return {k: v[0] for k, v in parse_qs(body).items()}

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            form = self._form()
            if path == "/token":
                self._json(*oauth.token(self.headers, form))
            elif path == "/introspect":
                self._json(200, oauth.introspect(form))
            elif path == "/device":
                self._json(*oauth.device(form))
            else:
                self._json(404, {"error": "not_found"})

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path != "/authorize":
                self._json(404, {"error": "not_found"})
                return
            status, headers = oauth.authorize({k: v[0] for k, v in parse_qs(parts.query).items()})
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
    return Handler


def start_oauth(client_id: str = "synedre-test-client", client_secret: str | None = None, user: str = "atlas",
                access_ttl_s: float = 3600.0) -> OAuthServer:
    oauth = OAuthServer(client_id, client_secret or "cs-" + secrets.token_urlsafe(20), user, access_ttl_s)
    server = ThreadingHTTPServer((oauth.host, 0), _handler(oauth))
    server.daemon_threads = True
    oauth.port = server.server_address[1]
    oauth._server = server
    threading.Thread(target=server.serve_forever, name="oauth-server", daemon=True).start()
    return oauth
