"""Passes 2 and 3 of the redactor (see `synedre.redact`): the secret shapes, `RULES`, found by
one combined regex (`union()`) and confirmed by each rule alone (`_precise`); and a bare AWS
secret key (`_bare_aws_secrets`). Also the markers they write (`KINDS`, `_MARKER`)."""
from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

AWS_SECRET_LEN = 40


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


@functools.cache
def union() -> tuple[re.Pattern[str], dict[str, list[int]]]:
    """`_union(RULES)`, compiled on first use: ~85 ms that a process which never redacts free
    text (most commands, most worker groups) no longer pays at import."""
    return _union(RULES)


@functools.cache
def _precise(i: int) -> tuple[re.Pattern[str], list[int], int]:
    """SecretRule i alone, with its groups: the numbers of the hidden ones, and of the kept one (0:
    none)."""
    rx = re.compile(RULES[i].lead + RULES[i].body)
    return rx, [n for g, n in rx.groupindex.items() if g.startswith("v")], rx.groupindex.get("k", 0)


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
