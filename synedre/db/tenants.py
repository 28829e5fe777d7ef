"""A client's tenant: where its agents work (the repository), what `./deploy` deploys (the
target) and where QA looks (the pre-production URL), as the directory file set them.

The repository is a local path (a working tree every spawn host reaches) or a git URL (each
host keeps its own mirror: spawn/repos.py). A tenant without one uses the fleet's default,
`SYNEDRE_WORKSPACE_REPO`. `check_repo` is the one rule for what the directory accepts.
"""
from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from synedre.db.types import Conn, Row

URL_SCHEMES = ("file", "ssh", "git", "https", "http")
# A deploy_hosts entry, `host` or `host:port`, as the deploy sandbox's allowedDomains take it
# (a `*.` wildcard allowed, an IPv6 address in brackets), without scheme nor path.
HOST_RE = re.compile(r"(?:\*\.)?[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::[0-9]{1,5})?"
                     r"|\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # a deploy_env entry
# git's scp-like syntax, `[user@]host:path`, as git reads it: no slash before the colon
_SCP = re.compile(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*:(?!/)[^\s]+")


def is_remote(spec: str) -> bool:
    """A URL (or scp-like address) rather than a local path."""
    return not spec.startswith("/")


def check_repo(spec: str) -> str:
    """The repository as stored, or ValueError saying what is accepted. Refused: a relative
    path (whose?), a password in the URL (it would sit in the database and every log: use a
    credential helper or an SSH key), git's `transport::address` (`ext::` runs a command)."""
    if not spec or spec != spec.strip() or any(c in spec for c in "\0\n\r"):
        raise ValueError("a repository must be one line without surrounding spaces")
    if spec.startswith("-") or "::" in spec:
        raise ValueError("not a repository path or URL (a leading '-' or a 'transport::' address is refused)")
    if spec.startswith("/"):
        return os.path.normpath(spec)
    if "://" in spec:
        parts = urlsplit(spec)
        if parts.scheme not in URL_SCHEMES:
            raise ValueError(f"a repository URL's scheme is one of {', '.join(URL_SCHEMES)}")
        if parts.password is not None:
            raise ValueError("a password in the repository URL is refused: use a git credential helper"
                             " or an SSH key")
        if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
            raise ValueError("a file:// repository URL names an absolute path (file:///srv/git/site.git)")
        if parts.scheme != "file" and not parts.hostname:
            raise ValueError("a repository URL names its host")
        return spec
    if _SCP.fullmatch(spec):
        return spec
    raise ValueError("a repository is an absolute path or a git URL (file://, ssh://, git://, https://,"
                     " user@host:path)")


def masked(spec: str) -> str:
    """The repository as it may be shown: a URL's password replaced."""
    try:
        parts = urlsplit(spec)
        if parts.password is None:
            return spec
    except ValueError:
        return spec
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


def repo_of_client(conn: Conn, client_id: int | None) -> str | None:
    """The repository of a client's tenant; None: the fleet's default."""
    if client_id is None:
        return None
    row = conn.execute("SELECT config->>'repo' AS repo FROM synedre.tenant_topology WHERE client_id = %s",
                       (client_id,)).fetchone()
    return row["repo"] if row else None


def repo_of_message(conn: Conn, message_id: int) -> tuple[int | None, str | None]:
    """(the message's client, its tenant's repository or None)."""
    row = conn.execute("SELECT client_id FROM synedre.email_states WHERE message_id = %s", (message_id,)).fetchone()
    client_id = row["client_id"] if row else None
    return client_id, repo_of_client(conn, client_id)


def repo_of_tenant(conn: Conn, codename: str | None) -> tuple[int | None, str | None]:
    """(the client whose codename the contract names, its tenant's repository or None)."""
    if not codename:
        return None, None
    row = conn.execute("SELECT id FROM synedre.clients WHERE codename = %s", (codename,)).fetchone()
    client_id = row["id"] if row else None
    return client_id, repo_of_client(conn, client_id)


def baseline(conn: Conn, repo: str | None) -> str | None:
    """The commit of `repo` (None: the fleet's default) last deployed with its deploy script
    and infrastructure accepted: what a deploy's are compared with (migrations/0019)."""
    row = conn.execute("SELECT sha FROM synedre.deploy_baselines WHERE repo = %s", (repo or "",)).fetchone()
    return row["sha"] if row else None


def set_baseline(conn: Conn, repo: str | None, sha: str, message_id: int | None, *, first: bool = False) -> None:
    """Record `sha` as accepted (`first`: only when none is recorded yet, as spawn does with
    the branch an agent's first clone starts from, before any agent commit)."""
    then = "NOTHING" if first else "UPDATE SET sha = EXCLUDED.sha, message_id = EXCLUDED.message_id, updated_at = now()"
    conn.execute(f"INSERT INTO synedre.deploy_baselines (repo, sha, message_id) VALUES (%s, %s, %s)"
                 f" ON CONFLICT (repo) DO {then}", (repo or "", sha, message_id))


def of_client(conn: Conn, codename: str) -> Row | None:
    """A client's name and tenant (deploy target, pre-production, repository), by codename."""
    return conn.execute(
        """SELECT c.name, coalesce(t.deploy_target, c.deploy_target) AS target,
                  t.config->>'preprod_url' AS preprod, t.config->>'repo' AS repo
             FROM synedre.clients c LEFT JOIN synedre.tenant_topology t ON t.client_id = c.id
            WHERE c.codename = %s""", (codename,)).fetchone()
