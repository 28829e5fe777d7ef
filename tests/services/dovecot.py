"""Run a real, throwaway Dovecot IMAP server for tests and benchmarks.

Written for Dovecot 2.3 (Debian ``dovecot-imapd``); 2.4 changed most config
keys, so other versions are rejected up front with a clear error.
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import imapclient

from tests.services._process import PORT_ATTEMPTS, ServiceProcess, base_dir_or_temp, free_port

DOVECOT_BIN = shutil.which("dovecot") or "/usr/sbin/dovecot"

CONFIG_TEMPLATE = """\
protocols = imap
listen = 127.0.0.1
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = {mechanisms}
default_internal_user = {internal_user}
default_login_user = {login_user}
first_valid_uid = {mail_uid}
last_valid_uid = {mail_uid}
mail_uid = {mail_uid}
mail_gid = {mail_gid}
mail_location = maildir:{root}/home/%u/Maildir
# Tests open many parallel connections for one user from one IP.
mail_max_userip_connections = 200
default_process_limit = 250
# inotify wakes IDLE immediately (plus Dovecot's fixed 500 ms batching delay);
# this poll interval is only the fallback when inotify is unavailable.
mailbox_idle_check_interval = 1 secs
# Throwaway data: skip fsync so bulk APPENDs are fast.
mail_fsync = never

passdb {{
  driver = passwd-file
  mechanisms = plain login
  args = scheme=PLAIN {root}/users
}}
{oauth2_passdb}userdb {{
  driver = static
  args = uid={mail_uid} gid={mail_gid} home={root}/home/%u
}}

service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
  # One long-lived login process instead of a fork per connection.
  service_count = 0
}}
service pop3-login {{
  inet_listener pop3 {{
    port = 0
  }}
}}
"""


# With `oauth2_introspection_url`: XOAUTH2 and OAUTHBEARER logins, each access token checked
# by POSTing it to that RFC 7662 introspection endpoint (no cache: every login asks).
OAUTH2_PASSDB = """\
passdb {{
  driver = oauth2
  mechanisms = xoauth2 oauthbearer
  args = {root}/dovecot-oauth2.conf.ext
}}
"""
OAUTH2_CONF = """\
introspection_mode = post
introspection_url = {url}
username_attribute = username
active_attribute = active
active_value = true
force_introspection = yes
"""


def dovecot_version() -> str:
    out = subprocess.run([DOVECOT_BIN, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def _user_or(name: str, fallback: str) -> str:
    try:
        pwd.getpwnam(name)
        return name
    except KeyError:
        return fallback


def _make_traversable(path: Path) -> None:
    # mkdtemp/pytest tmp dirs are 0700, but Dovecot's unprivileged processes
    # (mail, dovecot, dovenull) must be able to walk down to their files.
    for p in [path, *path.parents]:
        mode = p.stat().st_mode
        if mode & 0o011 != 0o011:
            p.chmod(mode | 0o011)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "<missing>"


@dataclass
class Dovecot(ServiceProcess):
    host: str
    port: int
    username: str
    password: str
    # A throwaway server: stop() kills its group (imap, auth, log... children) at once; on
    # SIGTERM the master itself waits a second for them, a second each test paid.
    stop_grace_s = 0.0

    def kick(self, user: str | None = None) -> None:
        """End every session of `user` (the login user by default), as a provider does when
        the access token a session logged in with expires."""
        subprocess.run(["doveadm", "-c", str(self.base_dir / "dovecot.conf"), "kick", user or self.username],
                       check=True, capture_output=True, timeout=30)

    def client(self) -> imapclient.IMAPClient:
        c = imapclient.IMAPClient(self.host, port=self.port, ssl=False, timeout=10)
        c.login(self.username, self.password)
        return c

    @property
    def log_path(self) -> Path:
        return self.base_dir / "dovecot.log"


def _launch(root: Path, port: int, username: str, password: str,
            oauth2_introspection_url: str | None = None) -> subprocess.Popen:
    mail = pwd.getpwnam("mail")
    conf = root / "dovecot.conf"
    # A restart in the same directory: the killed server's dotlock would keep the new one
    # waiting about ten seconds.
    (root / "state" / "instances.lock").unlink(missing_ok=True)
    if oauth2_introspection_url:
        (root / "dovecot-oauth2.conf.ext").write_text(OAUTH2_CONF.format(url=oauth2_introspection_url))
        (root / "dovecot-oauth2.conf.ext").chmod(0o644)  # read by the unprivileged auth process
    conf.write_text(
        CONFIG_TEMPLATE.format(
            root=root,
            port=port,
            mechanisms="plain login xoauth2 oauthbearer" if oauth2_introspection_url else "plain login",
            oauth2_passdb=OAUTH2_PASSDB.format(root=root) if oauth2_introspection_url else "",
            mail_uid=mail.pw_uid,
            mail_gid=mail.pw_gid,
            internal_user=_user_or("dovecot", "mail"),
            login_user=_user_or("dovenull", "mail"),
        )
    )
    users = root / "users"
    users.write_text(f"{username}:{{PLAIN}}{password}\n")
    users.chmod(0o644)  # read by the unprivileged auth process

    maildir = root / "home" / username / "Maildir"
    maildir.mkdir(parents=True, exist_ok=True)
    for p in (root / "home", root / "home" / username, maildir):
        os.chown(p, mail.pw_uid, mail.pw_gid)

    stderr = open(root / "dovecot.stderr", "wb")
    try:
        return subprocess.Popen(
            [DOVECOT_BIN, "-F", "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            start_new_session=True,
        )
    finally:
        stderr.close()


def start_dovecot(
    base_dir: Path | None = None,
    username: str = "atlas",
    password: str = "atlas-test-pw",
    timeout: float = 15.0,
    oauth2_introspection_url: str | None = None,
) -> Dovecot:
    version = dovecot_version()
    if not re.match(r"2\.3\.", version):
        raise RuntimeError(f"tests/services/dovecot.py supports Dovecot 2.3.x, found {version}")

    root, owns = base_dir_or_temp(base_dir, "dovecot-")
    _make_traversable(root)

    # Retry on a fresh port if Dovecot cannot bind the probed one.
    for attempt in range(PORT_ATTEMPTS):
        dc = Dovecot("127.0.0.1", free_port(), username, password, base_dir=root, owns_base_dir=owns)
        dc.process = _launch(root, dc.port, username, password, oauth2_introspection_url)
        atexit.register(dc.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and dc.process.poll() is None:
            try:
                dc.client().logout()
                return dc
            except (OSError, imapclient.exceptions.IMAPClientError):
                time.sleep(0.05)
        detail = f"--- dovecot.log ---\n{_tail(dc.log_path)}\n--- stderr ---\n{_tail(root / 'dovecot.stderr')}"
        dc.stop_failed_start(detail, f"Dovecot did not accept a login on port {dc.port}:\n{detail}", attempt)
    raise AssertionError("unreachable")
