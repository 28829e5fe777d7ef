"""DKIM: pass only for a valid signature made by the From: domain over the whole body."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import getaddresses
from functools import lru_cache
from pathlib import Path

import dkim


@dataclass(frozen=True)
class DkimResult:
    passed: bool
    reason: str
    domain: str | None = None


TxtLookup = Callable[..., bytes | None]


@lru_cache(maxsize=8)
def _keys(path: Path) -> dict[bytes, bytes]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {k.lower().rstrip(".").encode(): v.encode() for k, v in data.items()}


def keys_file_lookup(path: Path) -> TxtLookup:
    """A dnsfunc for dkimpy that answers from a JSON file instead of DNS (offline)."""
    keys = _keys(Path(path))

    def lookup(name: bytes, timeout: float = 5) -> bytes | None:
        return keys.get(name.lower().rstrip(b"."))

    return lookup


def from_domain(raw_from_values: list[str]) -> str | None:
    """The domain of the single From: address, None when absent or ambiguous."""
    if len(raw_from_values) != 1:
        return None  # several From: headers is a classic DKIM-bypass trick
    addrs = [a for _, a in getaddresses(raw_from_values) if "@" in a]
    if len(addrs) != 1:
        return None
    return addrs[0].rsplit("@", 1)[1].strip().lower().rstrip(".") or None


def verify(raw: bytes, raw_from_values: list[str], dnsfunc: TxtLookup | None,
           timeout: float = 5.0) -> DkimResult:
    domain = from_domain(raw_from_values)
    if domain is None:
        return DkimResult(False, "no_single_from_address")
    try:
        d = dkim.DKIM(raw, timeout=int(timeout) or 1)
        signatures = [v for k, v in d.headers if k.lower() == b"dkim-signature"]
    except Exception as exc:  # dkimpy raises assorted errors on malformed input
        return DkimResult(False, f"unparseable: {type(exc).__name__}")
    if not signatures:
        return DkimResult(False, "unsigned")
    reason = "no_aligned_signature"
    for idx in range(len(signatures)):
        try:
            kwargs = {"dnsfunc": dnsfunc} if dnsfunc else {}
            ok = d.verify(idx=idx, **kwargs)
        except dkim.DKIMException as exc:
            reason = f"invalid: {exc.__class__.__name__}"
            continue
        except Exception as exc:  # malformed tags can raise outside DKIMException
            reason = f"invalid: {type(exc).__name__}"
            continue
        signer = (d.domain or b"").decode("ascii", "replace").lower().rstrip(".")
        if not ok:
            reason = "bad_signature"
        elif signer != domain:
            reason = f"signer_not_from_domain:{signer}"
        elif b"l" in d.signature_fields:
            reason = "partial_body_signature"  # l= lets anyone append unsigned text
        else:
            return DkimResult(True, "pass", signer)
    return DkimResult(False, reason)
