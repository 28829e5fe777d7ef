"""Attach an email to an open chantier only on a confident match."""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MIN_SHARED_TERMS = 2
_STOP = frozenset("""
le la les un une des du de d l et ou a au aux en sur pour par avec dans ce cette ces son sa ses
the a an of to and or in on for with is are be it this that fwd tr re bonjour merci
""".split())


@dataclass(frozen=True)
class Candidate:
    id: int
    title: str
    mission_letter: str


def terms(text: str) -> set[str]:
    plain = unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()
    # a crude stem (first 6 letters) so "commande"/"commander" meet
    return {w[:6] for w in re.findall(r"[a-z0-9]{3,}", plain) if w not in _STOP}


def match(text: str, candidates: list[Candidate]) -> int | None:
    """The one candidate sharing enough terms with the email; None when unsure or tied."""
    words = terms(text)
    scored = sorted(((len(words & terms(f"{c.title} {c.mission_letter}")), c.id) for c in candidates),
                    reverse=True)
    if not scored or scored[0][0] < MIN_SHARED_TERMS:
        return None
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        return None
    return scored[0][1]
