"""Pass 1 of the redactor (see `synedre.redact`): exact values found at once (`_Exact`), in
every form they take (`_variants`), and which hidden values are worth remembering as exact
values for the rest of the launch (`_memorable`, `_decodings`)."""
from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus, unquote

import ahocorasick_rs

from synedre.redact.rules import _basic_credentials, _looks_random

MIN_SECRET_LEN = 6
MAX_REMEMBERED_LEN = 256  # longer values (key blocks) are caught again by their shape


def _variants(secret: str) -> set[str]:
    """The value as it appears JSON-escaped (once or twice), percent-encoded, or in base64:
    alone, or inside a longer base64 text (three byte alignments, the partial edges cut)."""
    once = {json.dumps(secret, ensure_ascii=a)[1:-1] for a in (False, True)}
    twice = {json.dumps(s, ensure_ascii=a)[1:-1] for s in once for a in (False, True)}
    # surrogatepass: an environment byte that is not UTF-8 arrives as a lone surrogate.
    out = {secret, *once, *twice, *(q(secret, safe=safe, errors="surrogatepass")
                                    for q in (quote, quote_plus) for safe in ("", "/"))}
    raw = secret.encode("utf-8", "surrogatepass")
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode()
        out |= {whole, whole.rstrip("=")}
        for k in range(3):
            coded = encode(b"\0" * k + raw).decode()
            out.add(coded[-(-8 * k // 6):8 * (k + len(raw)) // 6])
    return {v for v in out if len(v) >= MIN_SECRET_LEN}


_SURROGATE = re.compile("[\ud800-\udfff]")


class _Exact:
    """Many literal values found at once, leftmost then longest (Aho-Corasick): a regex
    alternation of them costs every position a test per distinct first character, which
    base64 forms make nearly all of them (0.6 s on 5 MB for 10 values, 3 s for 1,000,
    against 0.04 s and 0.16 s here)."""

    def __init__(self, words: set[str]):
        # The automaton takes UTF-8 only: a lone surrogate (which json.loads lets through,
        # or an undecodable environment byte) is searched for as U+FFFD, same length.
        patterns = sorted({_SURROGATE.sub("\ufffd", w) for w in words})
        self._ac = ahocorasick_rs.AhoCorasick(patterns, matchkind=ahocorasick_rs.MatchKind.LeftmostLongest)

    def sub(self, repl: str, s: str) -> str:
        try:
            hits = self._ac.find_matches_as_indexes(s)
        except UnicodeEncodeError:
            hits = self._ac.find_matches_as_indexes(_SURROGATE.sub("\ufffd", s))
        if not hits:
            return s
        out, pos = [], 0
        for _, a, b in hits:  # character offsets, in order, not overlapping
            out += [s[pos:a], repl]
            pos = b
        out.append(s[pos:])
        return "".join(out)


_ENCODED = re.compile(r"[\\%\"'` ]")  # what `_decodings` may undo
_UNQUOTE = re.compile(r"""^(?:\\*["'`])(.*?)(?:\\*["'`])$""", re.S)
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9!#$%&*+\-./:=?@^_~|]+")
# Words and identifiers, numbers, hashes, paths, URLs, variable references.
_NOT_MEMORABLE = re.compile(r"[A-Za-z_./-]*|[0-9.:-]+|[0-9a-fA-F-]{32,}|(?:/|\./|\.\./|~/).*|.*(?:://|\$).*")
# Kinds recognised by the name in front of the value only: weaker evidence.
_BY_NAME = frozenset({"env_secret", "json_secret", "header_secret", "entropy_secret"})


def _memorable(v: str, kind: str) -> bool:
    """A hidden value is remembered only if it looks like a secret, since it is then hidden
    all over the stream: a token (no spaces, brackets, commas or quotes: `False,`, `f(x)`
    and `{SECRETS[0]}` come from code), with a letter and a non-letter, not a word, number,
    hash, path, URL or variable; and random-looking if only its name said it was secret
    (`"token": "test-key"` is not remembered, `"token": "S3cretPassw0rd"` is)."""
    return (MIN_SECRET_LEN <= len(v) <= MAX_REMEMBERED_LEN and bool(_TOKEN_CHARS.fullmatch(v))
            and not _NOT_MEMORABLE.fullmatch(v) and any(c.isalpha() for c in v)
            and (kind not in _BY_NAME or _looks_random(8)(v)))


def _decodings(v: str) -> list[str]:
    """`v` as hidden, then unquoted, JSON-unescaped (two depths), percent-decoded, and the
    password of Basic credentials."""
    out = [v]
    if m := _UNQUOTE.match(v):
        out.append(m.group(1))
    for s in list(out):
        for _ in range(2):
            if "\\" not in s:
                break
            try:
                s = json.loads(f'"{s}"')
            except ValueError:
                break
            out.append(s)
    out += [unquote(s) for s in list(out) if "%" in s]
    for s in list(out):
        scheme, _, cred = s.partition(" ")
        if scheme.lower() == "basic" and _basic_credentials(cred):
            user_pass = base64.b64decode(cred).decode("utf-8", "replace")
            out += [user_pass, user_pass.partition(":")[2]]
        elif scheme.lower() == "bearer" and cred:
            out.append(cred)
    return list(dict.fromkeys(out))
