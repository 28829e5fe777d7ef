"""A real SMTP server on loopback (aiosmtpd) that keeps what it receives.

With `credentials` it offers AUTH PLAIN/LOGIN; with `bearer` (an RFC 7662 introspection URL)
AUTH XOAUTH2, each access token checked by POSTing it there, as Dovecot's oauth2 passdb does.
`refuse_rcpt` answers the next N RCPTs with a 451, `refuse_data` the next N DATA with a
554 (nothing kept); `drop_after_data` takes the next N
messages and closes the connection instead of replying, as a relay that crashes after
writing the mail to its queue would: the client cannot know whether the mail left.
"""
from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.services._process import free_port


@dataclass(frozen=True)
class Received:
    mail_from: str
    rcpt_tos: tuple[str, ...]
    data: bytes
    login: str | None

    @property
    def message(self) -> EmailMessage:
        msg = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        return msg


@dataclass(frozen=True)
class Bearer:
    login: bytes
    token: str


@dataclass
class SmtpSink:
    host: str
    port: int
    credentials: tuple[str, str] | None = None
    bearer: str | None = None  # introspection URL: XOAUTH2 offered
    received: list[Received] = field(default_factory=list)
    logins: list[tuple[str, bool]] = field(default_factory=list)  # (login, accepted)
    refuse_rcpt: int = 0
    drop_after_data: int = 0
    refuse_data: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _controller: Controller | None = field(default=None, repr=False)

    # aiosmtpd handler hooks -------------------------------------------------------------
    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        with self._lock:
            if self.refuse_rcpt > 0:
                self.refuse_rcpt -= 1
                return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self._lock:
            if self.refuse_data > 0:
                self.refuse_data -= 1
                return "554 5.7.1 message refused"
        login = session.auth_data.decode() if isinstance(session.auth_data, bytes) else None
        with self._lock:
            self.received.append(Received(envelope.mail_from, tuple(envelope.rcpt_tos),
                                          bytes(envelope.content), login))
            drop = self.drop_after_data > 0
            if drop:
                self.drop_after_data -= 1
        if drop:
            server.transport.abort()  # taken, and no reply ever comes
        return "250 2.0.0 queued"

    async def auth_XOAUTH2(self, server: Any, args: list[str]) -> AuthResult:
        """RFC 7628-style XOAUTH2: `user=<u>^Aauth=Bearer <token>^A^A`; on failure an error
        challenge, the client's empty answer, then 535 (what Gmail and Outlook do)."""
        if self.bearer is None:
            await server.push("504 5.5.4 Unrecognized authentication type")
            return AuthResult(success=False, handled=True)
        raw = base64.b64decode(args[1]) if len(args) > 1 else await server.challenge_auth("")
        fields = dict(f.split("=", 1) for f in raw.decode().split("\x01") if "=" in f)
        login, token = fields.get("user", "").encode(), fields.get("auth", "").removeprefix("Bearer ")
        result = server._authenticate("XOAUTH2", Bearer(login, token))
        if not result.success:
            await server.challenge_auth(json.dumps({"status": "401", "schemes": "bearer"}))
        return result

    def _introspect(self, token: str) -> dict[str, Any]:
        assert self.bearer is not None
        body = urllib.parse.urlencode({"token": token}).encode()
        with urllib.request.urlopen(self.bearer, data=body, timeout=10) as resp:
            return dict(json.loads(resp.read()))

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str,
                      auth_data: Any) -> AuthResult:
        if isinstance(auth_data, Bearer):
            answer = self._introspect(auth_data.token)
            ok = bool(answer.get("active")) and answer.get("username") == auth_data.login.decode()
        else:
            assert self.credentials is not None
            ok = (isinstance(auth_data, LoginPassword)
                  and (auth_data.login.decode(), auth_data.password.decode()) == self.credentials)
        with self._lock:
            self.logins.append((auth_data.login.decode() if isinstance(auth_data, LoginPassword | Bearer)
                                else "?", ok))
        # handled=False: aiosmtpd then answers the failure itself (535)
        return AuthResult(success=ok, handled=False, auth_data=auth_data.login if ok else None)

    # test helpers -----------------------------------------------------------------------
    def messages(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def wait_for(self, count: int, timeout: float = 10) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.received)} of {count} messages after {timeout}s")
            time.sleep(0.02)
        return self.messages()

    def stop(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None:
            controller.stop()


def start_smtp(credentials: tuple[str, str] | None = None, bearer: str | None = None) -> SmtpSink:
    """A started server; with `credentials` it offers AUTH PLAIN/LOGIN (over plain loopback),
    with `bearer` (an introspection URL) AUTH XOAUTH2, and refuses any other login."""
    last: Exception | None = None
    for _ in range(3):  # the probed port may be taken before the server binds it
        sink = SmtpSink("127.0.0.1", free_port(), credentials, bearer)
        kwargs: dict[str, Any] = {}
        if credentials is not None or bearer is not None:
            kwargs = {"authenticator": sink._authenticate, "auth_require_tls": False}
            # only the mechanisms it can check
            kwargs["auth_exclude_mechanism"] = ["PLAIN", "LOGIN"] if credentials is None else ["XOAUTH2"]
        controller = Controller(sink, hostname=sink.host, port=sink.port, ready_timeout=10, **kwargs)
        try:
            controller.start()
        except (OSError, RuntimeError) as exc:
            last = exc
            continue
        sink._controller = controller
        return sink
    raise RuntimeError(f"the SMTP test server did not start: {last}")
