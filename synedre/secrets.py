"""Every secret value the fleet holds, and the redactor built from them, in one place.

The values are gathered once per process and gathered again only when something they come
from changes: the settings object, a file (the mailbox registry, a key file of
`SYNEDRE_AI_KEYS_DIR`, Flower's credentials file, a secret file the registry names) or a
variable the registry names; and again when this process obtains an OAuth2 access token. The
redactor's costly part (every configured value's variants and the automaton that finds
them) is built with them; each caller gets a fresh redactor sharing it, since a redactor
remembers what it hid in one stream (synedre/redact/) and a launch must not inherit
another's memory.
"""
from __future__ import annotations

import os
import threading
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

from synedre import mailboxes, oauth
from synedre.config import KEYED_PROVIDERS, Settings, get_settings
from synedre.redact import Redactor

_lock = threading.Lock()
_built: tuple[object, tuple[str, ...], Redactor] | None = None


def values(s: Settings | None = None) -> tuple[str, ...]:
    """Every configured secret value, so streams and error texts can be scrubbed of them:
    the AI keys, the database and broker passwords (as written in the URL and decoded),
    each mailbox's password, OAuth2 client secret and refresh token (from the variables and
    files the registry names: those set; an absent or invalid registry adds none), the OAuth2
    access tokens this process holds, Flower's credentials, from its variable or its file (each user:pass and its
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
            found = _gather(s, stamp)
            _built = (stamp, found, Redactor(list(found)))
        return _built


def _stamp(s: Settings) -> tuple[int, tuple[tuple[str, object], ...], tuple[str | None, ...], int]:
    """What the values depend on beyond the settings object: the files' identities (the
    registry, the key files, and every secret file the registry names), the values of the
    variables the registry names (compared, never kept apart from the values), and the
    generation of the OAuth2 access tokens this process holds."""
    files = [s.mailboxes_file, s.flower_auth_file,
             *((s.ai_keys_dir / p) for p in KEYED_PROVIDERS if s.ai_keys_dir is not None)]
    registry = _identity(s.mailboxes_file)
    refs = _references(str(s.mailboxes_file), registry)
    files += [Path(where) for kind, where in refs if kind == "file"]
    seen = [(str(path), _identity(path)) for path in files]
    named = tuple(os.environ.get(where) for kind, where in refs if kind == "env")
    return id(s), tuple(seen), named, oauth.tokens.generation


def _identity(path: Path | str | None) -> object:
    try:
        st = Path(path).stat() if path is not None else None
    except OSError:
        st = None
    return st and (st.st_mtime_ns, st.st_size, st.st_ino)


@lru_cache(maxsize=4)
def _references(path: str, identity: object) -> tuple[tuple[str, str], ...]:
    """Where the registry's secrets are (("env", NAME) or ("file", path)), read again only when
    the file changed."""
    if identity is None:
        return ()
    try:
        return tuple(ref for box in mailboxes.load(Path(path)).values() for ref in box.references())
    except (mailboxes.RegistryError, AttributeError, ValueError):  # ValueError: not UTF-8
        return ()


def _gather(s: Settings, stamp: tuple) -> tuple[str, ...]:
    """`stamp`: what `_stamp` just read, the registry's variables' values among it."""
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
    found += [v for v in stamp[2] if v]
    for kind, where in _references(str(s.mailboxes_file), _identity(s.mailboxes_file)):
        if kind == "file":  # a client secret or a refresh token in a mounted file
            try:
                found.append(Path(where).read_text(encoding="utf-8").strip())
            except (OSError, UnicodeDecodeError):  # not there (yet): nothing to hide
                pass
    found += oauth.tokens.values()
    flower, _ = s.flower_auth()
    for auth in (s.flower_basic_auth, flower):
        for pair in auth.get_secret_value().split(",") if auth is not None else ():
            found += [pair.strip(), pair.partition(":")[2].strip()]
    return tuple(v for v in dict.fromkeys(found) if v)
