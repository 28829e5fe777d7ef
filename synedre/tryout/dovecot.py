"""Atlas's mailbox for a try-out: a Dovecot 2.3 of its own, its mail and configuration under
`<state dir>/try/dovecot`, on a loopback port, one user (`atlas`) and its password."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError

from synedre.tryout import _process

CONFIG = """\
protocols = imap
listen = 127.0.0.1
base_dir = {run}
state_dir = {root}/state
log_path = {root}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_internal_user = {internal}
default_login_user = {login}
first_valid_uid = {uid}
last_valid_uid = {uid}
mail_uid = {uid}
mail_gid = {gid}
mail_location = maildir:{root}/home/%u/Maildir
mailbox_idle_check_interval = 1 secs
passdb {{
  driver = passwd-file
  args = scheme=PLAIN {root}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={root}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service pop3-login {{
  inet_listener pop3 {{
    port = 0
  }}
}}
"""
START_TIMEOUT_S = 20.0


class DovecotError(RuntimeError):
    pass


@dataclass
class Dovecot:
    host: str
    port: int
    username: str
    password: str
    process: subprocess.Popen

    def client(self) -> IMAPClient:
        client = IMAPClient(self.host, port=self.port, ssl=False, timeout=10)
        client.login(self.username, self.password)
        return client

    def stop(self) -> None:
        _process.stop(self.process, 5)


def _users() -> tuple[str, str, pwd.struct_passwd]:
    """Who Dovecot's processes and the mail run as: its own users under root, else ourselves."""
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        return me.pw_name, me.pw_name, me

    def user_or(name: str, fallback: str) -> str:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            return fallback
    return user_or("dovecot", "mail"), user_or("dovenull", "mail"), pwd.getpwnam("mail")


def start(root: Path, port: int, username: str, password: str) -> Dovecot:
    """Dovecot on 127.0.0.1:`port`, answering a login before this returns; its mail stays in
    `root` from one start to the next."""
    binary = shutil.which("dovecot") or "/usr/sbin/dovecot"
    if not os.path.exists(binary):
        raise DovecotError("dovecot is not installed (Debian's dovecot-imapd: `make system` installs it)")
    internal, login, mail = _users()
    maildir = root / "home" / username / "Maildir"
    maildir.mkdir(parents=True, exist_ok=True)
    for p in (root, *root.parents):  # its unprivileged processes walk down to their files
        if os.geteuid() == 0 and p.stat().st_mode & 0o011 != 0o011:
            p.chmod(p.stat().st_mode | 0o011)
    if os.geteuid() == 0:
        for p in (root / "home", root / "home" / username, maildir, *maildir.rglob("*")):
            os.chown(p, mail.pw_uid, mail.pw_gid)
    # its sockets' paths must fit a Unix socket's 108 bytes: a deep state directory gets a short one
    run = root / "run" if len(str(root)) < 60 else Path(tempfile.mkdtemp(prefix="synedre-try-dovecot-"))
    conf = root / "dovecot.conf"
    conf.write_text(CONFIG.format(root=root, run=run, port=port, internal=internal, login=login,
                                  uid=mail.pw_uid, gid=mail.pw_gid))
    users = root / "users"
    users.write_text(f"{username}:{{PLAIN}}{password}\n")
    users.chmod(0o644 if os.geteuid() == 0 else 0o600)  # read by its unprivileged auth process
    with open(root / "dovecot.stderr", "wb") as err:
        process = subprocess.Popen([binary, "-F", "-c", str(conf)], stdin=subprocess.DEVNULL, stdout=err,
                                   stderr=err, start_new_session=True)
    box = Dovecot("127.0.0.1", port, username, password, process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:
        try:
            box.client().logout()
            return box
        except (OSError, IMAPClientError):
            time.sleep(0.1)
    box.stop()
    tail = "\n".join(((root / "dovecot.log").read_text(errors="replace") if (root / "dovecot.log").exists()
                      else (root / "dovecot.stderr").read_text(errors="replace")).splitlines()[-5:])
    raise DovecotError(f"Dovecot did not accept a login on 127.0.0.1:{port} within {START_TIMEOUT_S:.0f} s: {tail}")
