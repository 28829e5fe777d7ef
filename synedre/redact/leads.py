"""Where pass 2's combined regex can match, found by one automaton (see `synedre.redact`).

`rules.union()` starts every alternative with a rule's lead, and `re.search` tries it at
every position whose character starts some lead: the leads start with common letters
(`p`, `s`, `t`, `k`, `a`, `c`, `-`, `:`), so on prose or code the regex engine enters the
alternation several times a word, about 75 ns a character. Every match of a lead begins
with a short literal text, in one of the few cases a case-insensitive part lets it take
(`lead_texts`); one Aho-Corasick automaton over all of them finds, in one pass, every
position where a lead may match (`starts`), and the union is tried only there: the same
matches, since the union cannot match anywhere else.
"""
from __future__ import annotations

import functools
import re
from re import _constants as sre, _parser  # type: ignore[attr-defined]

import ahocorasick_rs

from synedre.redact.rules import RULES, _loosen

PREFIX_LEN = 4  # characters of each lead taken: a shorter prefix only finds more positions
MAX_TEXTS = 64  # texts per rule at most: past that, the shorter prefix
# The only characters beside ASCII ones that a case-insensitive ASCII letter matches (the `re`
# documentation names these four); `_cases` asks `re` itself which of them a letter takes.
_CASE_POOL = "".join(map(chr, range(128))) + "\u0130\u0131\u017f\u212a"
_SURROGATE = re.compile("[\ud800-\udfff]")


@functools.cache
def _cases(c: str) -> tuple[str, ...]:
    """Every character that `(?i:c)` matches (`c` itself among them)."""
    rx = re.compile(f"(?i:{re.escape(c)})")
    return tuple(dict.fromkeys([c, *(x for x in _CASE_POOL if rx.fullmatch(x))]))


def lead_texts(regex: str, most: int = PREFIX_LEN) -> set[str]:
    """Literal texts, none longer than `most` characters, one of which starts every match of
    `regex`: its first characters up to the first part that is not a literal, a group or an
    alternation of them, or zero-width; each in every case it can take."""
    parsed = _parser.parse(regex)
    texts, _ = _texts(parsed, bool(parsed.state.flags & sre.SRE_FLAG_IGNORECASE), most)
    assert texts and "" not in texts, regex  # a rule's lead starts with a literal (`rules.SecretRule`)
    return texts


def _texts(items: _parser.SubPattern | list, ignore: bool, most: int) -> tuple[set[str], bool]:
    """(the texts `items` starts with, whether each of them is all it can match)."""
    out = {""}
    for op, av in items:
        if op in (sre.ASSERT, sre.ASSERT_NOT, sre.AT):
            continue  # zero-width: the characters after it are still the next ones
        if op is sre.LITERAL:
            more, whole = set(_cases(chr(av)) if ignore else chr(av)), True
        elif op is sre.SUBPATTERN:
            _, add, remove, sub = av
            more, whole = _texts(sub, (ignore or bool(add & sre.SRE_FLAG_IGNORECASE))
                                 and not remove & sre.SRE_FLAG_IGNORECASE, most)
        elif op is sre.BRANCH:
            alternatives = [_texts(alt, ignore, most) for alt in av[1]]
            more, whole = set().union(*(t for t, _ in alternatives)), all(w for _, w in alternatives)
        else:
            return out, False
        if len(out) * len(more) > MAX_TEXTS:
            return out, False
        out = {(t + m)[:most] for t in out for m in more}
        if not whole or min(map(len, out)) >= most:
            return out, False
    return out, True


# A lead that is one common character (telegram_token's ':', in every JSON text, URL and
# log line) whose rule's body requires a digit right before it (`(?<=[0-9]{8}:)`): it is
# searched as each digit followed by it, and the position given is one character on.
_AFTER_A_DIGIT = {":"}
_DIGITS = "0123456789"  # what `[0-9]` matches in a str pattern: ASCII digits only


@functools.cache
def _automaton() -> tuple[ahocorasick_rs.AhoCorasick, list[int]]:
    """The automaton and, per text, how far past its match the lead starts."""
    shift: dict[str, int] = {}
    for r in RULES:
        # The union tries each rule's body loosened (`rules._loosen`): its texts are taken from that.
        texts = lead_texts(r.lead + _loosen(r.body))
        if texts <= _AFTER_A_DIGIT:
            assert r.body.startswith("(?<=[0-9]"), r  # the digit before is required
            texts = {d + t for d in _DIGITS for t in texts}
        for t in texts:
            n = 1 if t[1:] in _AFTER_A_DIGIT and t[0] in _DIGITS else 0
            assert shift.setdefault(t, n) == n, t  # one text, one meaning
    ordered = sorted(shift)
    return ahocorasick_rs.AhoCorasick(ordered), [shift[t] for t in ordered]


def starts(s: str) -> list[int]:
    """The positions of `s`, in order, where some rule's lead may match."""
    automaton, shift = _automaton()
    try:
        found = automaton.find_matches_as_indexes(s, overlapping=True)
    except UnicodeEncodeError:  # UTF-8 only: a lone surrogate is searched for as U+FFFD, same length
        found = automaton.find_matches_as_indexes(_SURROGATE.sub("\ufffd", s), overlapping=True)
    return sorted({a + shift[i] for i, a, _ in found})
