"""Every secret value the fleet holds, and the redactor built from them, in one place.

The values are gathered once per process and gathered again only when something they come
from changes: the settings object, a file (the mailbox registry, a key file of
`SYNEDRE_AI_KEYS_DIR`, Flower's credentials file) or a mailbox's password variable. The
redactor's costly part (every configured value's variants and the automaton that finds
them) is built with them; each caller gets a fresh redactor sharing it, since a redactor
remembers what it hid in one stream (synedre/redact.py) and a launch must not inherit
another's memory.
"""
from __future__ import annotations

import os
import threading
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

from synedre import mailboxes
from synedre.config import KEYED_PROVIDERS, Settings, get_settings
from synedre.redact import Redactor

_lock = threading.Lock()
_built: tuple[object, tuple[str, ...], Redactor] | None = None
_Files = tuple[tuple[str, object], ...]  # (stamp, values, base redactor)


def values(s: Settings | None = None) -> tuple[str, ...]:
    """Every configured secret value, so streams and error texts can be scrubbed of them:
    the AI keys, the database and broker passwords (as written in the URL and decoded),
    each mailbox's password (those whose variable is set; an absent or invalid registry
    adds none), Flower's credentials, from its variable or its file (each user:pass and its
    password)."""
    return _current(s or get_settings())[1]


def redactor(s: Settings | None = None) -> Redactor:
    """A redactor of every configured secret, fresh (it remembers nothing yet)."""
    return _current(s or get_settings())[2].fresh()


def _current(s: Settings) -> tuple[object, tuple[str, ...], Redactor]:
    global _built
    stamp = _stamp(s)
    with _lock:
        if _built is None or _built[0] != stamp:
            found = _gather(s, passwords=stamp[2])
            _built = (stamp, found, Redactor(list(found)))
        return _built


def _stamp(s: Settings) -> tuple[int, tuple[tuple[str, object], ...], tuple[str | None, ...]]:
    """What the values depend on beyond the settings object: the files' identities and the
    mailbox password variables' values (compared, never kept apart from the values)."""
    files = [s.mailboxes_file, s.flower_auth_file,
             *((s.ai_keys_dir / p) for p in KEYED_PROVIDERS if s.ai_keys_dir is not None)]
    seen: list[tuple[str, object]] = []
    for path in files:
        try:
            st = Path(path).stat() if path is not None else None
        except OSError:
            st = None
        seen.append((str(path), st and (st.st_mtime_ns, st.st_size, st.st_ino)))
    return id(s), tuple(seen), tuple(os.environ.get(n) for n in _password_envs(*seen[0]))


@lru_cache(maxsize=4)
def _password_envs(path: str, identity: object) -> tuple[str, ...]:
    """The registry's password variable names, read again only when the file changed."""
    if identity is None:
        return ()
    try:
        return tuple(box.password_env for box in mailboxes.load(Path(path)).values())
    except (mailboxes.RegistryError, AttributeError, ValueError):  # ValueError: not UTF-8
        return ()


def _gather(s: Settings, passwords: tuple[str | None, ...]) -> tuple[str, ...]:
    """`passwords`: the mailbox password variables' values, as the stamp just read them."""
    found = []
    for provider in KEYED_PROVIDERS:
        key, _ = s.resolve_key(provider)
        if key is not None:
            found.append(key.get_secret_value())
    for url in (s.database_url, s.broker_url):
        try:
            password = urlsplit(url or "").password
        except ValueError:  # an invalid IPv6 host: the URL is unusable anyway
            password = None
        if password:
            found += [password, unquote(password)]
    found += [v for v in passwords if v]
    flower, _ = s.flower_auth()
    for auth in (s.flower_basic_auth, flower):
        for pair in auth.get_secret_value().split(",") if auth is not None else ():
            found += [pair.strip(), pair.partition(":")[2].strip()]
    return tuple(v for v in dict.fromkeys(found) if v)
