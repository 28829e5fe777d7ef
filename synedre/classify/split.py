"""Split a plain-text body into COVER (the immediate sender's words) and QUOTED (SPEC §6).

Pure functions over strings. The split is positional: `cover` is a prefix of the body
(trailing whitespace removed) and `quoted` is the suffix starting at the first marker
line, so nothing is rewritten or lost. Markers come from what Gmail, Outlook and Apple
Mail really write, in French and English.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    cover: str
    quoted: str
    marker: str | None
    is_forward: bool


# Horizontal space includes the no-break spaces French typography puts before ':'.
# No two adjacent parts of a pattern may both match spaces: that backtracks
# quadratically on a long run of blanks (a hostile body must not stall a worker).
_SP = r"[ \t\u00a0\u202f]"
# Forwarded or nested-quoted header lines may carry '>' prefixes.
_LEAD = r"^[ \t\u00a0\u202f>]*"
_EOL = _SP + r"*\r?$"

_COLON = _SP + r"*:"
_FROM = r"(?:From|De)" + _COLON
_HEADER = r"(?:Sent|Envoy[ée]|Date|To|[ÀA]|Cc|Cci|Bcc|Subject|Objet|Reply-To)" + _COLON


def _dashed(title: str) -> str:
    return _LEAD + r"-{2,}" + _SP + r"*(?:" + title + r")" + _SP + r"*-{2,}" + _EOL


def _marker(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.MULTILINE)


# Ordered: the earliest match in the body wins; on the same line, the first entry wins,
# so a quoted forward ("> ----- Forwarded message") is a forward, not a mere quote.
# Outlook writes the same "Original Message"/header block for replies and forwards; we
# count them as forwards because that is how founders hand over client mail (P21).
MARKERS: tuple[tuple[str, bool, re.Pattern[str]], ...] = (
    ("gmail_forward", True, _marker(
        _dashed(r"Forwarded message|Message transf[ée]r[ée]"))),
    ("outlook_original", True, _marker(
        _dashed(r"Original Message|Message d['’]origine|Message original"))),
    ("apple_forward", True, _marker(
        _LEAD + r"(?:Begin forwarded message|D[ée]but du message (?:r[ée]exp[ée]di[ée]|transf[ée]r[ée]))"
        + _COLON + _EOL)),
    # An underscore rule alone is often a signature separator: it counts only when a
    # From:/De: line follows. Without the rule, From: needs two more header lines.
    ("outlook_header_block", True, _marker(
        _LEAD + r"_{8,}" + _EOL + r"\n(?:" + _SP + r"*\r?\n)*" + _LEAD + _FROM
        + r"|" + _LEAD + _FROM + r".*\n(?:" + _LEAD + _HEADER + r".*(?:\n|\Z)){2}")),
    # The date always comes first, so a digit on the first line separates an
    # attribution from French prose starting with "On"/"Le". Gmail wraps long
    # attributions, sometimes between "a" and "écrit".
    ("reply_attribution", False, _marker(
        _LEAD + r"(?:On|Le)" + _SP + r"(?=.*\d).*(?:\r?\n.*)??"
        + r"(?:wrote|a(?:" + _SP + r"+|" + _SP + r"*\r?\n" + _SP + r"*)[ée]crit)" + _COLON + _EOL)),
    ("quote_prefix", False, _marker(r"^" + _SP + r"*>")),
)

_FROM_LINE = _marker(_LEAD + _FROM + _SP + r"*(.*?)\r?$")
_ADDR = r"[^\s<>()\[\]\",;:@]+@[^\s<>()\[\]\",;:@]+"
# A display name can itself contain an address ("marie@x.fr via Y" <real@y.fr>), so the
# bracketed address wins, and the last one, as mail clients read it.
_ANGLE_ADDR = re.compile(r"<(?:mailto:)?(" + _ADDR + r")>", re.IGNORECASE)
_MAILTO_ADDR = re.compile(r"mailto:(" + _ADDR + r")", re.IGNORECASE)
# Starting only at a token boundary keeps the search linear on a long run of non-address text.
_BARE_ADDR = re.compile(r"(?<![^\s<>()\[\]\",;:@])" + _ADDR)


def split_cover_quoted(body: str) -> Split:
    """Split at the earliest marker; without one, the whole body is cover."""
    best: tuple[int, str, bool] | None = None
    for kind, is_forward, pattern in MARKERS:
        found = pattern.search(body)
        if found and (best is None or found.start() < best[0]):
            best = (found.start(), kind, is_forward)
    if best is None:
        return Split(cover=body, quoted="", marker=None, is_forward=False)
    start, kind, is_forward = best
    return Split(cover=body[:start].rstrip(), quoted=body[start:], marker=kind, is_forward=is_forward)


def forwarded_sender(quoted: str) -> str | None:
    """The lowercased address on the first From:/De: line of `quoted`, else None."""
    line = _FROM_LINE.search(quoted)
    if line is None:
        return None
    value = line.group(1)
    for pattern in (_ANGLE_ADDR, _MAILTO_ADDR):
        found = pattern.findall(value)
        if found:
            return found[-1].lower()
    bare = _BARE_ADDR.search(value)
    return bare.group(0).lower() if bare else None
