"""One text cut in several strings (the text blocks of one message), stored so that a secret
the cuts split is hidden too (`merge_pieces`)."""
from __future__ import annotations

from synedre.redact.rules import _MARKER, KINDS

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
