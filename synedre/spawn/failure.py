"""Why a launch's API calls failed, in words: the CLI's own error in one line, classified.

The pinned CLI ends a run whose API call failed with a `result` of subtype `success` and
`is_error: true`, its `result` text the error as the CLI words it ("There's an issue with the
selected model …", "Invalid API key · Fix external API key", "API Error: Request rejected
(429) · …"), with `api_error_status` and `api_error_type` when the API answered at all. Each
rule below is one kind of failure an operator acts on differently; the first that matches
names it, and the reason reads `<kind>: <the CLI's words>`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_CHARS = 300


@dataclass(frozen=True)
class ApiFailure:
    status: int | None  # the API's HTTP status; None when no answer came (network, timeout)
    type: str  # the API's error type (authentication_error, not_found_error…), or ""
    text: str  # the CLI's own words, one line, lower case

    @classmethod
    def of(cls, raw: dict[str, Any]) -> ApiFailure:
        status = raw.get("api_error_status")
        return cls(status if isinstance(status, int) else None, str(raw.get("api_error_type") or ""),
                   one_line(str(raw.get("result") or "")).lower())


@dataclass(frozen=True)
class FailureRule:
    name: str
    check: Callable[[ApiFailure], bool]


# In order: the first that matches names the failure (a billing refusal is a 400; a 529 says "overloaded").
RULES = (
    FailureRule("credit", lambda f: "credit balance" in f.text or "billing" in f.type or "billing" in f.text),
    FailureRule("authentication", lambda f: f.status in (401, 403)
                or f.type in ("authentication_error", "permission_error") or "api key" in f.text),
    FailureRule("model not found", lambda f: f.status == 404 or "selected model" in f.text),
    FailureRule("rate limit", lambda f: f.status == 429 or f.type == "rate_limit_error"),
    FailureRule("overloaded", lambda f: f.status == 529 or f.type == "overloaded_error"
                or "overloaded" in f.text),
    FailureRule("timeout", lambda f: any(w in f.text for w in ("timed out", "timeout", "etimedout"))),
    FailureRule("network", lambda f: f.status is None and any(w in f.text for w in (
                "connection", "econn", "enotfound", "eai_again", "network", "fetch failed", "socket", "dns"))),
)


def one_line(text: str) -> str:
    return " ".join(text.split())


def kind(raw: dict[str, Any]) -> str:
    """The failure's kind (a rule's name), or `API error` when none matches."""
    f = ApiFailure.of(raw)
    return next((r.name for r in RULES if r.check(f)), "API error")


def reason(raw: dict[str, Any]) -> str:
    """`<kind>: <the CLI's words>`, one line, bounded: what `synedre launches`, `inspect` and
    the founder's alert show for a run the CLI ended with an error."""
    words = one_line(str(raw.get("result") or "")) or f"HTTP {raw.get('api_error_status') or '?'}"
    line = f"{kind(raw)}: {words}"
    return line if len(line) <= MAX_CHARS else line[:MAX_CHARS - 1] + "…"
