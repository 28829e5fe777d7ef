"""Hide secrets in the agent's stream before it is written anywhere (SPEC §8 Stream, §13).

`Redactor(secrets)` lives for one launch. Each string goes through three passes:

1. exact values (Aho-Corasick): the configured secrets, plus every value a rule hid
   earlier in the launch (it is *remembered*), each also JSON-escaped, percent-encoded and
   in base64 (alone, or inside a longer base64 text at any byte offset);
2. `RULES`, one combined regex: `NAME=value`, `name: value`, `"name": "value"`,
   `--password x`, `mysql -p…` where the name looks secret, URL credentials, Authorization
   and Cookie headers, private key blocks, webhooks, DSNs, the token formats of known
   providers; and a fallback, a random-looking word shortly after a secret word in any
   other syntax ("the password for alice is …");
3. a bare AWS secret key: a 40-character base64 word with high entropy.

In a JSON object, a string under a key whose name looks secret is hidden whole, and one
under a secret-ish key (`nonce`, `salt`…) if it looks random. Each hit becomes
`[REDACTED:<kind>]`. What passes 2 and 3 hide is remembered (if it looks like a secret,
see `_memorable`); if a call taught the redactor something, pass 1 runs again on its
output, so a repetition earlier in the same string or object is hidden too. A value never
runs across a line break, raw or JSON-escaped at any depth.

Limits, by design:
- exact secrets shorter than `MIN_SECRET_LEN` characters are ignored: values like
  "admin" or "1234" would blank out innocent text everywhere; so are hidden values that
  look like words, paths or code (`_memorable`), and the memory holds `MAX_REMEMBERED`;
- a secret is guaranteed absent from the output only if it contains no `[` or `]` and
  is not part of a marker itself (a marker's brackets could complete it);
- it errs towards hiding: `key=lambda…` in code loses its value too;
- each call sees one string: a secret cut across two strings (two partial-message
  deltas, two content blocks) is not seen whole by `redact_obj`. The launcher therefore
  stores no delta text at all (its length only: the complete message repeats it) and
  redacts the text blocks of one message joined as well, then hides in each block what
  the joined text's redaction hid across them (`merge_pieces`; synedre/spawn/reassembly.py,
  `Reassembler`).

Why hand-written rules rather than `detect-secrets`: measured on this stream, its line
scanner took 1.9 s on a 0.5 MB line and grows faster than the line (5 MB lines are
routine here), its keyword and entropy plugins flag ordinary words ("password", "The")
without its file-level filters, and it reports values, not spans, so a replacing pass
would still be needed. Its plugin list served as the checklist of token formats.
"""
from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus, unquote

import ahocorasick_rs

MIN_SECRET_LEN = 6
MAX_REMEMBERED = 1000  # values learned in one launch; configured secrets are not counted
MAX_REMEMBERED_LEN = 256  # longer values (key blocks) are caught again by their shape
AWS_SECRET_LEN = 40
CLEAN_CACHE_LEN, CLEAN_CACHE_SIZE = 256, 100_000  # strings up to this long, this many at most

T = TypeVar("T")


# --- value grammar ------------------------------------------------------------------
# An escape that is not a line break at any JSON depth: an odd run of backslashes before
# a character other than n, r, t, or pairs of backslashes before an ordinary character.
# So `\n`, `\\n`, `\\\\n` all end a value, and a quote escaped at any depth does not.
# Runs of other characters are matched possessively (`++`): one step per run, not per
# character (5x faster on a long value), and a run is never split again on backtracking.
_ESC = r"(?:\\\\)*\\[^\\nrt\s]|(?:\\\\)+(?=[^\\\"nrt\s])"


def _value(n: int, *, line: bool) -> str:
    """An assignment's value, hidden in groups v{n}…: quoted ('…', "…", or \\"…\\" inside
    JSON text, closed on the same line), else a word (`line=False`) or the rest of the line
    (`line=True`: headers, YAML). An unclosed quote counts as part of a word."""
    unquoted = (r"(?!(?:True|False|None|true|false|null|nil|undefined|yes|no|on|off)\b"  # code
                r"|[0-9]{1,5}\b(?![.:/@-])|[(\[{])"
                rf"(?P<v{n + 3}>'?(?:[^\s\"'\\]++|{_ESC})+)" if not line else
                # Not a type annotation or a YAML literal: `token: str`, `auth: true`.
                r"(?!(?:str|int|float|bool|bytes|None|null|true|false|True|False|yes|no|on|"
                r"off|string|number|boolean|undefined|any|Any|SecretStr|Optional|Union|list|"
                r"List|dict|Dict|object|Path|[0-9.]+)\b)"
                # Bearer and Basic credentials are left to their own rules: the scheme stays.
                r"(?!(?i:bearer)[ \t]+[A-Za-z0-9._~+/-]{16}|(?i:basic)[ \t]+[A-Za-z0-9+/]{8})"
                rf"(?P<v{n + 3}>[^\s{{\[(<\"',;\\](?:[^\n\r\"'\\]++|{_ESC})*)")
    return (rf"(?:'(?P<v{n}>(?:[^'\\\n\r]++|{_ESC})+)'"
            rf"|\"(?P<v{n + 1}>(?:[^\"\\\n\r]++|{_ESC})+)\""
            rf"|(?P<q{n}>\\+)\"(?P<v{n + 2}>(?:[^\"\\\n\r]++|(?!(?P=q{n})\")(?:{_ESC}))+)"
            rf"(?:(?P=q{n})\")?"
            rf"|{unquoted})")


_ENV_VALUE = _value(0, line=False)
_LINE_VALUE = r"(?:[ \t]*(?=[\"'\\])" + _value(0, line=False) + r"|[ \t]+" + _value(10, line=True) + ")"
# "name": "value" / 'name': 'value' / 'name' => 'value', at any JSON depth (q = its escapes).
_QUOTED_NAME_VALUE = (
    r"[A-Za-z0-9_.-]{0,80}(?P<q>\\*)[\"'][ \t]*(?::|=>)[ \t]*(?:"
    r"(?P=q)\"(?P<v>(?:[^\"\\\n\r]++|(?!(?P=q)\")\\.)+)(?:(?P=q)\"|(?=\\*(?:\n|\Z)))"
    r"|(?P=q)'(?P<v1>(?:[^'\\\n\r]++|\\.)+)')")
_ENV_ASSIGN = r"[A-Za-z0-9_]{0,80}[ \t]*:?=(?![=>~])[ \t]*" + _ENV_VALUE
_HEADER_ASSIGN = r"[A-Za-z0-9_.-]{0,80}[ \t]*:(?![:=/])" + _LINE_VALUE
# The fallback after a secret word in any other syntax: "the password for alice is …",
# `key -> …`: a few words, a verb or an arrow, then one word, hidden only if it looks random.
_NEAR = (r"[A-Za-z0-9_]{0,20}(?:[ \t]+[\w.@-]{1,40}){0,3}?"
         r"(?:[ \t]+(?:is|was|are|becomes|became|now|set to|changed to|reset to)[ \t]*[:=]?"
         r"|[ \t]*(?:->|=>))[ \t]*[\"'`]?"
         r"(?P<v>[^\s'\"`\\,;()<>\[\]|]{6,200}?)(?=[.,;:!?)\]]*(?:[\s'\"`\\]|\Z))")


# --- rules --------------------------------------------------------------------------

@dataclass(frozen=True)
class SecretRule:
    """One shape of secret. `lead` starts with a literal character (the combined regex
    then gets a first-character prefilter: about 10x faster on a 5 MB line than
    lookbehind-led alternatives); boundaries are therefore lookbehinds *after* it.
    Groups `v…` are hidden and the rest kept; with a group `k`, `k` is kept and the rest
    hidden; with neither, the whole match is hidden. `check`, if set, must accept the
    first hidden value, else the match is not a secret."""
    kind: str
    description: str
    lead: str
    body: str = ""
    check: Callable[[str], bool] | None = None


def _word(literal: str) -> str:
    """`literal` at the start of a word, written literal-first (see `SecretRule`)."""
    e = re.escape(literal)
    return f"{e}(?<![A-Za-z0-9_]{e})"


def _ci(word: str) -> list[str]:
    """`word` with its first letter in either case and the rest case-insensitive."""
    return [f"{c}(?i:{word[1:]})" for c in (word[0].lower(), word[0].upper())]


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


_HEXLIKE = re.compile(r"[0-9a-fA-F-]+")  # hashes, UUIDs: identifiers, not secrets


def _classes(s: str) -> int:
    return (any(c.islower() for c in s) + any(c.isupper() for c in s)
            + any(c.isdigit() for c in s) + any(not c.isalnum() for c in s))


def _looks_random(min_len: int) -> Callable[[str], bool]:
    def check(v: str) -> bool:
        if len(v) < min_len or "[REDACTED" in v or _HEXLIKE.fullmatch(v):
            return False
        classes = _classes(v)
        if classes < 2 or (classes == 2 and not (len(v) >= 16 and any(c.isdigit() for c in v))):
            return False
        return _entropy(v) >= min(3.0, 0.75 * math.log2(len(v)))
    return check


def _aws_secret_like(v: str) -> bool:
    return (len(v) == AWS_SECRET_LEN and any(c.isupper() for c in v) and any(c.islower() for c in v)
            and any(c.isdigit() for c in v) and _entropy(v) >= 4.0)


def _basic_credentials(v: str) -> bool:
    try:
        return b":" in base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        return False


# Names whose value is hidden whatever it is. AUTH(?!OR) keeps GIT_AUTHOR_NAME readable.
_STRICT = [
    *_ci("passw(?:or)?d"), *_ci("passphrase"), *_ci("secret"), *_ci("token"), *_ci("key"),
    *_ci("credential"), *_ci("auth(?:orization|(?!or))"), *_ci("cookie"),
    # DB_PASS, dbPass; not bypass, compass, passenger.
    "pass(?<![A-Za-z]pass)(?![a-z])", "Pass(?<![A-Z]Pass)(?![a-z])", "PASS(?<![A-Za-z]PASS)(?![A-Z])",
    # *_PWD is a password (MYSQL_PWD); PWD and OLDPWD alone are the working directory.
    *(f"{p}(?<=[A-Za-z0-9_]{p})(?<!{o}{p})" for p, o in (("pwd", "old"), ("Pwd", "Old"), ("PWD", "OLD"))),
]
_FLAG_WORDS = r"(?:password|passwd|pass|passphrase|token|secret|api[-_]?key|apikey|key|auth|credentials?)"

RULES: tuple[SecretRule, ...] = (
    # Up to the END line, else to the end of the (JSON) string: a key cut short is still hidden.
    SecretRule("private_key", "PEM or PGP private key block", "-----BEGIN",
         r"[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[^\"\\-]++|\\.|-)*?"
         r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|(?=\"|\\?\Z))"),
    # An OpenSSH key body ("openssh-key-v1" in base64), even if its header was lost.
    SecretRule("private_key", "OpenSSH private key body", "b3BlbnNzaC1rZXktdjE",
         r"[A-Za-z0-9+/=]*(?:(?:\\+[nr]|[\r\n])+[A-Za-z0-9+/=]+)*"),
    SecretRule("anthropic_key", "Anthropic API key", _word("sk-ant-"), r"[A-Za-z0-9_-]{20,}"),
    SecretRule("openai_key", "OpenAI API key (sk-…, sk-proj-…)", _word("sk-"), r"[A-Za-z0-9_-]{20,}"),
    SecretRule("github_token", "GitHub token", _word("gh"), r"[pousr]_[A-Za-z0-9]{20,}"),
    SecretRule("github_token", "GitHub fine-grained token", _word("github_pat_"), r"[A-Za-z0-9_]{20,}"),
    SecretRule("gitlab_token", "GitLab token", _word("gl"),
         r"(?:pat|dt|ptt|rt|soat|cbt|imt|ft|oas|agent)-[A-Za-z0-9_-]{20,}"),
    # An access key, and a secret key within the next 80 characters of the line.
    *(SecretRule("aws_access_key", "AWS access key (and the secret key next to it)", _word(p),
           r"[A-Z0-9]{16}(?![A-Za-z0-9])(?:(?P<k>(?:[^\n\r\\]|\\[^nrt]){1,80}?)"
           r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=]))?") for p in ("AKIA", "ASIA")),
    SecretRule("slack_token", "Slack token", _word("xox"), r"[baprse]-[A-Za-z0-9-]{10,}"),
    SecretRule("slack_token", "Slack app token", _word("xapp-"), r"[0-9]-[A-Za-z0-9-]{10,}"),
    SecretRule("webhook", "Slack webhook", r"hooks\.slack\.com/",
         r"(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9/_-]{20,})"),
    SecretRule("webhook", "Discord webhook", "discord",
         r"(?:app)?\.com/api/webhooks/(?P<v>[0-9]{15,22}/[A-Za-z0-9_-]{40,100})"),
    SecretRule("google_api_key", "Google API key", _word("AIza"), r"[A-Za-z0-9_-]{35}"),
    *(SecretRule("stripe_key", "Stripe key", _word(p), r"(?:live|test)_[A-Za-z0-9]{16,}")
      for p in ("sk_", "rk_", "pk_")),
    SecretRule("sendgrid_key", "SendGrid API key", _word("SG."), r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
    SecretRule("npm_token", "npm token", _word("npm_"), r"[A-Za-z0-9]{36}"),
    SecretRule("pypi_token", "PyPI token", _word("pypi-"), r"AgE[A-Za-z0-9_-]{50,}"),
    SecretRule("huggingface_token", "Hugging Face token", _word("hf_"), r"[A-Za-z0-9]{30,}"),
    *(SecretRule("twilio_key", "Twilio account SID or API key", _word(p), r"[0-9a-f]{32}(?![A-Za-z0-9])")
      for p in ("AC", "SK")),
    # <bot id>:<35 characters>; the bot id is public, the part after the colon is not.
    SecretRule("telegram_token", "Telegram bot token", ":",
         r"(?<=[0-9]{8}:)(?<![0-9]{11}:)(?P<v>[A-Za-z0-9_-]{35})(?![A-Za-z0-9_-])"),
    SecretRule("jwt", "JSON Web Token", _word("eyJ"), r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"),
    *(SecretRule("bearer_token", "Bearer credentials", _word(b), r"[ \t]+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)")
      for b in ("bearer", "Bearer", "BEARER")),
    *(SecretRule("basic_auth", "Basic credentials", _word(b),
           r"[ \t]+(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])", _basic_credentials)
      for b in ("basic", "Basic", "BASIC")),
    SecretRule("basic_auth", "curl -u user:password", "-",
         r"(?<=[ \t'\"]-)(?:u|-user)[ \t=]+[\"']?[^\s:'\"@/\\]+:(?P<v>[^\s'\"\\]+)",
         lambda v: not v.isdigit()),
    # A Sentry DSN's key (and legacy secret) sit where a URL's user and password would.
    SecretRule("sentry_dsn", "Sentry DSN key", "://",
         r"(?<=[A-Za-z0-9+.-]://)(?P<v>[0-9a-f]{32})(?::(?P<v1>[0-9a-f]{32}))?(?=@)"),
    # scheme://user:password@host. RFC 3986 forbids / ? # in userinfo; a raw @ is tolerated
    # (greedy, backs off to the last @) because people do write p@ss into URLs.
    SecretRule("url_password", "password in a URL", "://",
         r"(?<=[A-Za-z0-9+.-]://)[^\s:/?#@\"'\\]*:(?P<v>[^\s/?#\"'\\]+)(?=@)"),
    *(SecretRule("cli_secret", "password of a mysql client", m,
           r"(?:dump|admin|import|check|slap|sh)?\b(?:[ \t]+(?!-p)[^\s|;&<>]+){0,12}?[ \t]+-p"
           + _ENV_VALUE)
      for m in (_word("mysql"), _word("mariadb"))),
    SecretRule("cli_secret", "sshpass -p", _word("sshpass"), r"[ \t]+-p[ \t]*" + _ENV_VALUE),
    SecretRule("cli_secret", "--password value, --api-key=value…", "--",
         rf"(?<![A-Za-z0-9_-]--)(?!no-)(?:[A-Za-z0-9]+[-_])*?{_FLAG_WORDS}(?:=|[ \t]+)(?!-)" + _ENV_VALUE),
    # Names: the match starts at the secret word (the rest of the name is kept anyway).
    *(r for w in _STRICT for r in (
        SecretRule("json_secret", '"name": "value" (JSON, Python, PHP)', w, _QUOTED_NAME_VALUE),
        SecretRule("env_secret", "NAME=value (shell, .env, code)", w, _ENV_ASSIGN),
        SecretRule("header_secret", "name: value (HTTP header, YAML)", w, _HEADER_ASSIGN),
        SecretRule("entropy_secret", "a random word near a secret word", w, _NEAR, _looks_random(8)))),
)

KINDS = ("secret", *dict.fromkeys(r.kind for r in RULES), "aws_secret_key")  # what a marker can name

_MARKER = re.compile(r"\[REDACTED(?::[a-z_]+)?\]")
_GROUP = re.compile(r"\(\?P<([A-Za-z_][A-Za-z0-9_]*)>")
_BACKREF = re.compile(r"\(\?P=[A-Za-z_][A-Za-z0-9_]*\)")


def _inside_marker(s: str, x: int) -> bool:
    """Whether position x cuts a marker an earlier pass wrote (`-u [REDACTED:secret]` is
    not a user `[REDACTED` with a password `secret]`)."""
    lo = s.rfind("[REDACTED", max(0, x - 40), x)
    return lo >= 0 and (m := _MARKER.match(s, lo)) is not None and x < m.end()


def _loosen(body: str) -> str:
    """`body` without capturing groups: a group per value costs every branch of the union
    a save and restore of all group marks (3x slower). A backreference (only ever to a run
    of backslashes) becomes any run: a superset, the precise rule decides."""
    return _BACKREF.sub(r"\\\\*", _GROUP.sub("(?:", body))


def _union(rules: tuple[SecretRule, ...]) -> tuple[re.Pattern[str], dict[str, list[int]]]:
    """A superset of `rules` in one regex, factored by lead so that each first character
    and each lead word is tested once; the empty group `_<i>` closing alternative i names
    it in `Match.lastgroup`. Also, per rule, the rules to try from it in the union's order
    (those that may match where it may: the same first character)."""
    by_char: dict[str, dict[str, list[int]]] = {}
    for i, rule in enumerate(rules):
        first = rule.lead[:2] if rule.lead[0] == "\\" else rule.lead[:1]
        assert rule.lead[len(first):len(first) + 1] not in ("*", "+", "?", "{"), rule  # literal-first
        by_char.setdefault(first, {}).setdefault(rule.lead[len(first):], []).append(i)
    alternatives: list[str] = []
    order: dict[str, list[int]] = {}
    for first, leads in by_char.items():
        inner = "|".join(f"{rest}(?:{'|'.join(f'{_loosen(rules[i].body)}(?P<_{i}>)' for i in ids)})"
                         for rest, ids in leads.items())
        alternatives.append(f"{first}(?:{inner})")
        same = [i for ids in leads.values() for i in ids]
        order |= {f"_{i}": same[n:] for n, i in enumerate(same)}
    return re.compile("|".join(alternatives)), order


_UNION, _ORDER = _union(RULES)


@functools.cache
def _precise(i: int) -> tuple[re.Pattern[str], list[int], int]:
    """SecretRule i alone, with its groups: the numbers of the hidden ones, and of the kept one (0:
    none)."""
    rx = re.compile(RULES[i].lead + RULES[i].body)
    return rx, [n for g, n in rx.groupindex.items() if g.startswith("v")], rx.groupindex.get("k", 0)


# --- exact values -------------------------------------------------------------------

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


# A 40-character word of the base64 alphabet (an AWS secret key) is found with bytes.find
# on a mask, not with a regex: no literal can lead it, so a regex would visit every position
# (~200 ms on 5 MB, against a few ms).
_MASK = bytes.maketrans(bytes(range(256)), bytes(
    ord("A") if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "+/") else ord(" ")
    for b in range(256)))
_RUN = b"A" * AWS_SECRET_LEN
_NOT_A = re.compile(rb"[^A]")


def _bare_aws_secrets(text: str) -> set[str]:
    if len(text) < AWS_SECRET_LEN:
        return set()
    raw = text.encode("utf-8", "surrogatepass")
    mask = raw.translate(_MASK)
    found = set()
    i = mask.find(_RUN)
    while i >= 0:  # i starts a run of base64 characters: find is leftmost
        stop = _NOT_A.search(mask, i + AWS_SECRET_LEN)
        j = stop.start() if stop else len(mask)
        if j - i == AWS_SECRET_LEN + 1 and i > 0 and raw[i - 1] == 0x5C and raw[i] in b"nrt":
            i += 1  # after a JSON-escaped line break (\n then the key) the n is not the key's
        # `_`, `-`, `%` would make it part of a longer token; `=` after it, of a base64 text.
        if (j - i == AWS_SECRET_LEN and (i == 0 or raw[i - 1] not in b"_-%")
                and (j == len(raw) or raw[j] not in b"_-%=")):
            value = raw[i:j].decode("ascii")
            if _aws_secret_like(value):
                found.add(value)
        i = mask.find(_RUN, j)
    return found


# --- the redactor -------------------------------------------------------------------

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

    def fresh(self) -> Redactor:
        """A new redactor of the same configured secrets that shares the work done on them
        (their variants, the automaton finding them) and remembers nothing yet."""
        self._refresh()
        other = Redactor()
        other._configured, other._words = self._configured, set(self._words)
        other._exact, other._stale = self._exact, False
        return other

    @property
    def remembered(self) -> int:
        """How many values it learned so far (for logs: the values themselves are secrets)."""
        return len(self._remembered)

    def _refresh(self) -> None:
        """Rebuilt at a public call's edges only, not for every value learned within it."""
        if self._stale:
            self._exact = _Exact(self._words) if self._words else None
            self._stale = False
            self._clean.clear()

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
        while m := _UNION.search(s, pos):
            at = m.start()
            # The union chose the first rule that may match here; the precise rules decide,
            # in the union's order from that one on.
            for i in _ORDER[m.lastgroup]:  # type: ignore[index]
                rx, hidden, kept = _precise(i)
                if (hit := rx.match(s, at)) and (
                        replaced := self._replace(i, hit, hidden, kept, markers)) is not None:
                    out += [s[done:at], replaced]
                    done = pos = hit.end()
                    break
            else:
                pos = at + 1
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
        if isinstance(obj, str):
            return self._text(obj)
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                if not isinstance(k, str):
                    out[k] = self._obj(v)
                    continue
                name, (secret_key, hint_key) = self._text(k), _key_kind(k)
                if secret_key and isinstance(v, str) and v:
                    out[name] = self._hide("json_secret", v)
                elif hint_key and isinstance(v, str) and _hint_value(v):
                    out[name] = self._hide("entropy_secret", v)
                else:
                    out[name] = self._obj(v)
            return out
        if isinstance(obj, (list, tuple)):
            return [self._obj(v) for v in obj]
        if isinstance(obj, (int, float)) and not isinstance(obj, bool) and self._exact:
            # A secret of digits (a PIN, a numeric password) written as a JSON number: the
            # number becomes the marker's string, since no number can stand for one.
            text = json.dumps(obj)
            return obj if (hidden := self._exact_pass(text)) == text else hidden
        return obj

    def redact_obj(self, obj: T) -> T:
        """Every string of a JSON-like value, keys included; a string under a key whose name
        looks secret (`"api_key": …`, an MCP tool's `token` argument) is hidden whole. If the
        object taught the redactor a value, its strings are checked for it once more."""
        self._begin()
        out = self._obj(obj)
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


_KNOWN_MARKERS = frozenset(f"[REDACTED:{k}]" for k in KINDS)


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix (a binary search over slices, in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    """The length of the longest common suffix, at most `limit`."""
    lo, hi = 0, max(0, limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _whole_markers(s: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) widened so as not to cut a marker of `s` (cosmetic: hiding more is safe)."""
    for m in _MARKER.finditer(s, max(0, start - 80), min(len(s), end + 80)):
        if m.start() < start < m.end():
            start = m.start()
        if m.start() < end < m.end():
            end = m.end()
    return start, end


def merge_pieces(whole: str, alone: list[str]) -> list[str]:
    """The pieces of one text cut in several strings (the text blocks of one message), to
    be stored, so that a secret the cuts split is hidden too: `whole` is the text joined
    then redacted, `alone` each piece redacted by itself. Where `whole` and the pieces
    joined differ, the span from their first to their last difference (widened to whole
    markers) becomes a marker in every piece it touches. What stays visible is then a
    prefix and a suffix common to both: neither the pieces nor their concatenation show
    anything that either redaction hid. `whole` itself is not stored: a piece alone may
    hide what the whole does not (a 40-character key at a piece's end that the next piece
    lengthens). Redact the whole before the pieces: a piece's cut value, remembered
    first, would make the exact pass hide only its start in the whole."""
    joined = "".join(alone)
    if len(alone) < 2 or whole == joined:
        return list(alone)
    start = _common_prefix(joined, whole)
    tail = _common_suffix(joined, whole, min(len(joined), len(whole)) - start)
    start, end = _whole_markers(joined, start, len(joined) - tail)
    # Named after what the whole text's redaction hid there, if it names a known kind.
    stop = len(whole) - (len(joined) - end)
    marker = next((m.group() for m in _MARKER.finditer(whole, max(0, start - 80), stop + 80)
                   if m.end() > start and m.start() < stop and m.group() in _KNOWN_MARKERS),
                  "[REDACTED:secret]")
    out, a = [], 0
    for piece in alone:
        b = a + len(piece)
        if (a < end and start < b) or (start == end and a <= start <= b):
            piece = joined[a:max(a, min(start, b))] + marker + joined[max(a, min(end, b)):b]
        out.append(piece)
        a = b
    return out


def _map_strings(obj: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {(fn(k) if isinstance(k, str) else k): _map_strings(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_strings(v, fn) for v in obj]
    return obj
