"""A try-out on this machine (`make try`, `synedre try run`): local stand-ins for every account
but the LLM keys, under `<state dir>/try/`, as the embedded PostgreSQL is under the state
directory, so that one email can be watched becoming a recap.

- Atlas's mailbox: a Dovecot of its own (`dovecot/`), its port and password kept in `try.json`;
- the founder's inbox: an SMTP server that keeps every mail as a file (`sink/NNNN.eml`);
- an example client with a real repository (`client/repo`) whose `./deploy` uploads to a local
  pre-production host (`client/preprod`, served on 127.0.0.2);
- clamd with a local database (`clamd/`), or the reason attachments will be blocked;
- the mailbox registry and the directory for them (`mailboxes.toml`, `directory.json`,
  built from the shipped `directory.example.json`).

The fleet itself is `synedre fleet`'s, started by the command with this environment.
"""
from __future__ import annotations

import json
import secrets
import socket
from dataclasses import dataclass, field
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Any

from synedre import ROOT
from synedre.tryout import clamd, dovecot, sink, site

SAMPLE = Path(__file__).with_name("sample-request.eml")
PASSWORD_ENV = "TRY_ATLAS_PASSWORD"  # the registry's password_env: the password itself is in try.json
USERNAME = "atlas"
CLIENT = "boulangerie-dupont"  # the client of directory.example.json whose tenant the try-out provides


@dataclass(frozen=True)
class Layout:
    root: Path  # <state dir>/try

    @property
    def config(self) -> Path:
        return self.root / "try.json"

    @property
    def sink(self) -> Path:
        return self.root / "sink"

    @property
    def repo(self) -> Path:
        return self.root / "client" / "repo"

    @property
    def preprod(self) -> Path:
        return self.root / "client" / "preprod"

    @property
    def mailboxes(self) -> Path:
        return self.root / "mailboxes.toml"

    @property
    def directory(self) -> Path:
        return self.root / "directory.json"

    def saved(self) -> dict[str, Any]:
        """What the last start recorded (ports, password, the keys it lacked), or {}."""
        try:
            return dict(json.loads(self.config.read_text()))
        except (OSError, ValueError):
            return {}


def layout(state_dir: Path) -> Layout:
    return Layout(state_dir.resolve() / "try")


def _port(wanted: int | None, host: str = "127.0.0.1") -> int:
    """`wanted` if it is still free (a restart keeps its addresses), else a free one."""
    for candidate in ([wanted] if wanted else []) + [0]:
        with socket.socket() as s:
            try:
                s.bind((host, candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError(f"no free port on {host}")


@dataclass
class Running:
    layout: Layout
    mailbox: dovecot.Dovecot
    founder_inbox: sink.Sink
    preprod: Any  # the pre-production host's HTTP server
    preprod_url: str
    clamd: clamd.Clamd | None
    clamd_error: str | None
    env: dict[str, str] = field(default_factory=dict)  # what the fleet runs with

    def stop(self) -> None:
        for stop in (self.preprod.shutdown, self.founder_inbox.stop, self.mailbox.stop,
                     *([self.clamd.stop] if self.clamd else [])):
            stop()


def start(state_dir: Path, missing_keys: list[str]) -> Running:
    """Every stand-in started (a second start reuses the ports, password, mail and repository
    of the first), the registry and directory written; `env` is what the fleet needs."""
    where = layout(state_dir)
    where.root.mkdir(parents=True, exist_ok=True)
    where.root.chmod(0o711)  # traversable by Dovecot's and the deploy's users, listable by none
    old = where.saved()
    ports = {name: _port(old.get(name), "127.0.0.2" if name == "preprod" else "127.0.0.1")
             for name in ("imap", "smtp", "preprod", "clamd")}
    password = old.get("password") or secrets.token_urlsafe(16)
    where.config.write_text(json.dumps({**ports, "password": password, "missing_keys": missing_keys}, indent=1))
    where.config.chmod(0o600)
    started: list[Any] = []
    try:
        box = dovecot.start(where.root / "dovecot", ports["imap"], USERNAME, password)
        started.append(box)
        inbox = sink.start(where.sink, ports["smtp"])
        started.append(inbox)
        if site.ensure_repository(where.repo) or not (where.preprod / site.TARGET).exists():
            where.preprod.mkdir(parents=True, exist_ok=True)
            site.publish_repository(where.repo, where.preprod)
        host = site.serve(where.preprod, ports["preprod"])
    except BaseException:
        for service in started:
            service.stop()
        raise
    try:
        scanner, scanner_error = clamd.start(where.root / "clamd", ports["clamd"]), None
    except clamd.ClamdError as exc:
        scanner, scanner_error = None, str(exc)
    preprod_url = f"http://{site.HOST}:{ports['preprod']}"
    where.mailboxes.write_text(
        f'# Written by `synedre try run` at each start: the try-out\'s Atlas mailbox and its founder\'s inbox.\n'
        f'[mailboxes.atlas]\nimap_host = "127.0.0.1"\nimap_port = {ports["imap"]}\nimap_tls = false\n'
        f'smtp_host = "127.0.0.1"\nsmtp_port = {ports["smtp"]}\nsmtp_tls = false\n'
        f'username = "{USERNAME}"\npassword_env = "{PASSWORD_ENV}"\nfolder = "INBOX"\n')
    where.directory.write_text(json.dumps(directory(where.repo, preprod_url), ensure_ascii=False, indent=1))
    env = {"SYNEDRE_MAILBOXES_FILE": str(where.mailboxes), PASSWORD_ENV: password, site.URL_VARIABLE: preprod_url}
    if scanner is not None:
        env["SYNEDRE_CLAMD"] = scanner.address
    return Running(where, box, inbox, host, preprod_url, scanner, scanner_error, env)


def directory(repo: Path, preprod_url: str) -> dict[str, Any]:
    """The shipped example directory, its client `CLIENT`'s tenant the try-out's own: the local
    repository, the local pre-production host (the one host its deploy may reach) and the
    variable that tells the deploy where that host is."""
    data = json.loads((ROOT / "directory.example.json").read_text())
    for client in data["clients"]:
        if client["codename"] == CLIENT:
            client.update(deploy_target=site.TARGET, preprod_url=preprod_url, repo=str(repo),
                          deploy_hosts=[preprod_url.removeprefix("http://")], deploy_env=[site.URL_VARIABLE],
                          infra_paths=[])
    return data


def sample_request() -> bytes:
    """The shipped sample, with a Message-ID and a date of its own at each send (a second copy
    of one Message-ID would be taken for the first)."""
    raw = SAMPLE.read_bytes()
    head, sep, body = raw.partition(b"\n\n")
    lines = [line for line in head.split(b"\n") if not line.lower().startswith((b"message-id:", b"date:"))]
    lines += [f"Date: {formatdate(localtime=True)}".encode(),
              f"Message-ID: {make_msgid(domain='atelier-moreau.example')}".encode()]
    return b"\n".join(lines) + sep + body


def deliver(state_dir: Path, raw: bytes) -> None:
    """APPEND `raw` to Atlas's inbox on the running try-out's Dovecot."""
    from imapclient import IMAPClient
    from imapclient.exceptions import IMAPClientError

    saved = layout(state_dir).saved()
    if not saved:
        raise FileNotFoundError(f"no try-out in {layout(state_dir).root}: start one with `make try`")
    client = IMAPClient("127.0.0.1", port=int(saved["imap"]), ssl=False, timeout=10)
    try:
        client.login(USERNAME, saved["password"])
        client.append("INBOX", raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    finally:
        try:
            client.logout()
        except (IMAPClientError, OSError):  # the append is done, or its error is the one to report
            pass
