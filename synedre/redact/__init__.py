"""Hide secrets in the agent's stream before it is written anywhere (SPEC §8 Stream, §13).

`Redactor(secrets)` lives for one launch. Each string goes through three passes:

1. exact values (Aho-Corasick, `exact`): the configured secrets, plus every value a rule hid
   earlier in the launch (it is *remembered*), each also JSON-escaped, percent-encoded and
   in base64 (alone, or inside a longer base64 text at any byte offset);
2. `rules.RULES`, one combined regex tried only where one automaton of every rule's leading
   literal says a rule may start (`leads`): `NAME=value`, `name: value`, `"name": "value"`,
   `--password x`, `mysql -p…` where the name looks secret, URL credentials, Authorization
   and Cookie headers, private key blocks, webhooks, DSNs, the token formats of known
   providers; and a fallback, a random-looking word shortly after a secret word in any
   other syntax ("the password for alice is …");
3. a bare AWS secret key: a 40-character base64 word with high entropy (`rules`).

In a JSON object, a string under a key whose name looks secret is hidden whole, and one
under a secret-ish key (`nonce`, `salt`…) if it looks random. Each hit becomes
`[REDACTED:<kind>]`. What passes 2 and 3 hide is remembered (if it looks like a secret,
see `exact._memorable`); if a call taught the redactor something, pass 1 runs again on its
output, so a repetition earlier in the same string or object is hidden too. A value never
runs across a line break, raw or JSON-escaped at any depth.

Limits, by design:
- exact secrets shorter than `MIN_SECRET_LEN` characters are ignored: values like
  "admin" or "1234" would blank out innocent text everywhere; so are hidden values that
  look like words, paths or code (`exact._memorable`), and the memory holds `MAX_REMEMBERED`;
- a secret is guaranteed absent from the output only if it contains no `[` or `]` and
  is not part of a marker itself (a marker's brackets could complete it);
- it errs towards hiding: `key=lambda…` in code loses its value too;
- each call sees one string: a secret cut across two strings (two partial-message
  deltas, two content blocks) is not seen whole by `redact_obj`. The launcher therefore
  stores no delta text at all (its length only: the complete message repeats it) and
  redacts the text blocks of one message joined as well, then hides in each block what
  the joined text's redaction hid across them (`pieces.merge_pieces`; synedre/spawn/reassembly.py,
  `Reassembler`).

Why hand-written rules rather than `detect-secrets`: measured on this stream, its line
scanner took 1.9 s on a 0.5 MB line and grows faster than the line (5 MB lines are
routine here), its keyword and entropy plugins flag ordinary words ("password", "The")
without its file-level filters, and it reports values, not spans, so a replacing pass
would still be needed. Its plugin list served as the checklist of token formats.
"""
from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from synedre.redact import leads
from synedre.redact.exact import _ENCODED, MIN_SECRET_LEN, _decodings, _Exact, _memorable, _variants
from synedre.redact.rules import (
    _MARKER,
    RULES,
    _bare_aws_secrets,
    _inside_marker,
    _looks_random,
    _precise,
    union,
)

MAX_REMEMBERED = 1000  # values learned in one launch; configured secrets are not counted
CLEAN_CACHE_LEN, CLEAN_CACHE_SIZE = 256, 100_000  # strings up to this long, this many at most
# Every character `json.dumps` can write for an int or a float (`-1.5e+300`, `Infinity`, `NaN`):
# an exact value made of others cannot be inside any number, which is then left unencoded.
_NUMBER_CHARS = frozenset("0123456789+-.eEInfinityNaN")

T = TypeVar("T")


class Redactor:
    """One per launch: it remembers what it hid (see the module docstring)."""

    def __init__(self, secrets: list[str] | None = None):
        self._configured = {s for s in secrets or [] if len(s) >= MIN_SECRET_LEN}
        self._words = {v for s in self._configured for v in _variants(s)}  # what pass 1 looks for
        self._remembered: dict[str, None] = {}  # insertion-ordered set
        self._seen: set[tuple[str, str]] = set()  # values hidden so far: decoded once
        self._exact: _Exact | None = None
        self._stale = True
        self._learned = False  # set when a value was remembered during the current call
        # Short strings the passes left as they were, for the current exact set: a stream
        # repeats them (keys, types, ids) in every event. Emptied whenever the set changes.
        self._clean: set[str] = set()
        self._keys: dict[str, tuple[bool, bool]] = {}  # clean keys, as `_clean`: their `_key_kind`
        self._plain: set[str] = set()  # the clean keys neither secret nor secret-ish
        self._numeric = False  # whether an exact value could be found inside a number's JSON text

    def fresh(self) -> Redactor:
        """A new redactor of the same configured secrets that shares the work done on them
        (their variants, the automaton finding them) and remembers nothing yet."""
        self._refresh()
        other = Redactor()
        other._configured, other._words = self._configured, set(self._words)
        other._exact, other._stale, other._numeric = self._exact, False, self._numeric
        return other

    @property
    def remembered(self) -> int:
        """How many values it learned so far (for logs: the values themselves are secrets)."""
        return len(self._remembered)

    def _refresh(self) -> None:
        """Rebuilt at a public call's edges only, not for every value learned within it."""
        if self._stale:
            self._exact = _Exact(self._words) if self._words else None
            self._numeric = any(_NUMBER_CHARS.issuperset(w) for w in self._words)
            self._stale = False
            self._clean.clear()
            self._keys.clear()
            self._plain.clear()

    def _remember(self, value: str, kind: str) -> None:
        if len(value) < MIN_SECRET_LEN or (value, kind) in self._seen:  # decodings are never longer
            return
        if len(self._seen) < 10 * MAX_REMEMBERED:
            self._seen.add((value, kind))
        for v in _decodings(value) if _ENCODED.search(value) else (value,):
            if (v not in self._remembered and len(self._remembered) < MAX_REMEMBERED
                    and _memorable(v, kind) and v not in self._configured):
                self._remembered[v] = None
                self._words |= _variants(v)
                self._stale = self._learned = True

    def _hide(self, kind: str, value: str) -> str:
        if value[:1] == "[" and _MARKER.fullmatch(value):  # hidden by the exact pass already
            return value
        self._remember(value, kind)
        return f"[REDACTED:{kind}]"

    def _replace(self, i: int, m: re.Match[str], hidden: list[int], kept: int,
                 markers: bool) -> str | None:
        """The text of match `m` of rule `i` with its secrets hidden; None if it is not one.
        `markers`: whether the string holds markers of an earlier pass."""
        rule, regs = RULES[i], m.regs
        start, end = regs[0]
        if kept and regs[kept][0] >= 0:
            spans = [(start, regs[kept][0]), (regs[kept][1], end)]
        elif hidden:
            spans = [regs[n] for n in hidden if regs[n][1] > regs[n][0]]
        else:
            spans = [(start, end)]
        s = m.string
        if not spans or (rule.check and not rule.check(s[spans[0][0]:spans[0][1]])) \
                or (markers and any(_inside_marker(s, x) for span in spans for x in span)):
            return None
        out, pos = [], start
        for a, b in spans:
            out += [s[pos:a], self._hide(rule.kind, s[a:b])]
            pos = b
        out.append(s[pos:end])
        return "".join(out)

    def _rules(self, s: str) -> str:
        out, done, pos, markers = [], 0, 0, "[REDACTED" in s
        rules, order = union()
        # `rules.search(s, pos)` over and over, tried only where a lead may start (`leads`).
        for at in leads.starts(s):
            if at < pos or not (m := rules.match(s, at)):
                continue
            # The union chose the first rule that may match here; the precise rules decide,
            # in the union's order from that one on.
            for i in order[m.lastgroup]:  # type: ignore[index]
                rx, hidden, kept = _precise(i)
                if (hit := rx.match(s, at)) and (
                        replaced := self._replace(i, hit, hidden, kept, markers)) is not None:
                    out += [s[done:at], replaced]
                    done = pos = hit.end()
                    break
        return "".join(out) + s[done:] if out else s

    def _exact_pass(self, s: str) -> str:
        return self._exact.sub("[REDACTED:secret]", s) if self._exact else s

    def _begin(self) -> None:
        self._refresh()
        self._learned = False

    def _end(self) -> bool:
        """Whether the call taught it a value (the exact pass is then ready for it)."""
        self._refresh()
        return self._learned

    def _text(self, s: str) -> str:
        if s in self._clean:
            return s
        out = self._rules(self._exact_pass(s))
        for value in _bare_aws_secrets(out):
            self._remember(value, "aws_secret_key")
            out = out.replace(value, "[REDACTED:aws_secret_key]")
        if out == s and len(s) <= CLEAN_CACHE_LEN and len(self._clean) < CLEAN_CACHE_SIZE:
            self._clean.add(s)  # nothing hidden, so nothing learned from it
        return out

    def redact_text(self, s: str) -> str:
        self._begin()
        out = self._text(s)
        return self._exact_pass(out) if self._end() else out

    def _obj(self, obj: Any) -> Any:
        # The common JSON types are told by `type(…) is` and handled inline (`_dict`): a stream
        # event is a dozen nodes, and a call per node was most of the reader's time. Anything
        # else (a subclass, a tuple) takes the general path, which is the same logic. What
        # nothing was hidden in is returned itself, not copied (`_dict`).
        t = type(obj)
        if t is str:
            return obj if obj in self._clean else self._text(obj)
        if t is dict:
            return self._dict(obj)
        if t is list:
            return self._list(obj)
        if obj is None or t is bool or ((t is int or t is float) and not self._numeric):
            return obj
        return self._other(obj)

    def _other(self, obj: Any) -> Any:
        if isinstance(obj, dict):  # first: a decoded line (`spawn.stream.Decoded`) is one
            return self._dict(obj)
        if isinstance(obj, str):
            return self._text(obj)
        if isinstance(obj, (list, tuple)):
            return [self._obj(v) for v in obj]
        if isinstance(obj, (int, float)) and not isinstance(obj, bool) and self._numeric:
            # A secret of digits (a PIN, a numeric password) written as a JSON number: the
            # number becomes the marker's string, since no number can stand for one.
            text = json.dumps(obj)
            return obj if (hidden := self._exact_pass(text)) == text else hidden
        return obj

    def _list(self, obj: list[Any]) -> list[Any]:
        out = None
        for i, v in enumerate(obj):
            new = self._dict(v) if type(v) is dict else self._obj(v)
            if out is None:
                if new is v:
                    continue
                out = obj[:i]
            out.append(new)
        return obj if out is None else out

    def _dict(self, obj: dict[Any, Any]) -> dict[Any, Any]:
        """`obj` itself if nothing in it changed, else a new dict from the first change on:
        most events hide nothing, and copying each cost as much as walking it. A key seen
        clean and neither secret nor secret-ish (`_plain`: nearly every key of a stream) takes
        the inline path, the others `_member_of`."""
        out: dict[Any, Any] | None = None
        new: Any
        clean, plain, numeric = self._clean, self._plain, self._numeric
        for k, v in obj.items():
            if k in plain:
                name, t = k, type(v)
                if t is str:
                    if v not in clean:
                        new = self._text(v)
                    elif out is None:  # the commonest member: a clean string, nothing copied yet
                        continue
                    else:
                        new = v
                elif t is dict:
                    new = self._dict(v)
                elif t is list:
                    new = self._list(v)
                elif v is None or t is bool or ((t is int or t is float) and not numeric):
                    if out is None:
                        continue
                    new = v
                else:
                    new = self._obj(v)
            else:
                name, new = self._member_of(k, v)
            if out is None:
                if name is k and new is v:
                    continue
                out = _before(obj, k)
            out[name] = new
        return obj if out is None else out

    def _member_of(self, k: Any, v: Any) -> tuple[Any, Any]:
        """A member of a JSON object whose key is not known plain: (its key, its value), redacted."""
        if (kind := self._keys.get(k)) is not None:  # a key seen clean: a stream repeats its keys
            name = k
        elif isinstance(k, str):
            name, kind = self._text(k), _key_kind(k)
            if name is k and len(k) <= CLEAN_CACHE_LEN and len(self._keys) < CLEAN_CACHE_SIZE:
                self._keys[k] = kind
                if kind == (False, False):
                    self._plain.add(k)
        else:
            return k, self._obj(v)
        if type(v) is str:
            secret_key, hint_key = kind
            if secret_key and v:
                return name, self._hide("json_secret", v)
            if hint_key and _hint_value(v):
                return name, self._hide("entropy_secret", v)
            return name, v if v in self._clean else self._text(v)
        if (kind[0] or kind[1]) and isinstance(v, str):
            return name, self._member(kind[0], v)
        return name, self._obj(v)

    def _member(self, secret_key: bool, v: str) -> str:
        """A str subclass under a secret or secret-ish key: as `_dict` does for a str."""
        if secret_key and v:
            return self._hide("json_secret", v)
        return self._hide("entropy_secret", v) if _hint_value(v) else self._text(v)

    def redact_obj(self, obj: T) -> T:
        """Every string of a JSON-like value, keys included; a string under a key whose name
        looks secret (`"api_key": …`, an MCP tool's `token` argument) is hidden whole. If the
        object taught the redactor a value, its strings are checked for it once more. The input
        is never changed; what nothing was hidden in comes back as it was, not copied."""
        self._begin()
        out: Any = self._dict(obj) if isinstance(obj, dict) else self._obj(obj)  # a stream event: a dict
        return _map_strings(out, self._exact_pass) if self._end() else out

    def redact_line(self, line: T) -> T:
        """One line, bytes or str (same type back). A JSON line is redacted value by value and
        re-serialised, so escapes are handled and the result stays valid JSON."""
        text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else str(line)
        body = text.rstrip("\r\n")
        out = None
        if body.lstrip().startswith(("{", "[")):
            try:
                out = json.dumps(self.redact_obj(json.loads(body)), ensure_ascii=False)
            except (ValueError, RecursionError):
                pass  # not JSON after all: redact it as text
        out = (self.redact_text(body) if out is None else out) + text[len(body):]
        return out.encode("utf-8") if isinstance(line, bytes) else out  # type: ignore[return-value]


_KEY_NAME = re.compile(r"(?i:key|secret|token|passw(?:or)?d|passphrase|pwd|auth(?!or)|authorization"
                       r"|credential|cookie)|(?<![A-Za-z])(?i:pass)(?![a-z])|(?<=[a-z])Pass(?![a-z])")
# Secret-ish keys: their value is hidden only if it looks random. Not "signature": Claude's
# thinking blocks carry one, random and public.
_hint_value = _looks_random(12)
_HINT_NAME = re.compile(r"(?i:salt|hmac|nonce|seed|cred|otp|dsn|sas|webhook|cipher|encrypt|signing|master)")


@functools.lru_cache(maxsize=4096)
def _key_kind(k: str) -> tuple[bool, bool]:
    """Whether a JSON key's name looks secret, or secret-ish (a stream repeats its keys)."""
    return bool(_KEY_NAME.search(k)), bool(_HINT_NAME.search(k))


def _before(obj: dict[Any, Any], key: Any) -> dict[Any, Any]:
    """The members of `obj` before `key` (one of its keys, the very object)."""
    return dict(itertools.takewhile(lambda kv: kv[0] is not key, obj.items()))


def _map_strings(obj: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {(fn(k) if isinstance(k, str) else k): _map_strings(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_strings(v, fn) for v in obj]
    return obj
