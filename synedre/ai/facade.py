"""The one way the code calls an LLM (SPEC §10): routing per feature, fallback in order.

`complete` and `embed` return None when every route failed; `last_failure()` then says
why, route by route. It is reset at the start of every call and lives in a ContextVar,
so it is per thread (and per asyncio task): never stale, never another call's.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from synedre import secrets
from synedre.ai.providers import PROVIDERS, Provider
from synedre.config import Settings, get_settings
from synedre.log import log

MAX_REASON_CHARS = 200
T = TypeVar("T")


class AIError(Exception):
    """A configuration error of the facade (unknown feature, unknown provider, bad routing row)."""


@dataclass(frozen=True)
class Route:
    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


@dataclass(frozen=True)
class FeatureRouting:
    feature: str
    routes: list[Route]  # primary first, then the fallbacks in order
    timeout_s: float = 30.0
    json_output: bool = False

    def __post_init__(self) -> None:
        if not self.routes:
            raise AIError(f"feature {self.feature!r} has no route")
        unknown = [str(r) for r in self.routes if r.provider not in PROVIDERS]
        if unknown:  # fail loudly: a typo must not turn into a silently skipped fallback
            raise AIError(f"feature {self.feature!r} routes to unknown provider(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(PROVIDERS))}")
        if self.timeout_s <= 0:
            raise AIError(f"feature {self.feature!r}: timeout_s must be > 0")


@dataclass(frozen=True)
class Completion:
    text: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    duration_s: float  # of the call that answered
    feature: str


@dataclass(frozen=True)
class Embedding:
    vectors: list[list[float]]
    provider: str
    model: str
    input_tokens: int
    duration_s: float
    feature: str


_last_failure: ContextVar[str | None] = ContextVar("synedre_ai_last_failure", default=None)


def last_failure() -> str | None:
    """Why the last `complete`/`embed` of this thread returned None; None after a success."""
    return _last_failure.get()


def load_routing(feature: str) -> FeatureRouting:
    from synedre.db import transaction  # the facade stays importable without a database

    with transaction() as conn:
        row = conn.execute(
            "SELECT provider, model, fallbacks, timeout_s, json_output FROM synedre.ai_routing "
            "WHERE feature = %s", (feature,)).fetchone()
    if row is None:
        raise AIError(f"no AI routing for feature {feature!r} (table synedre.ai_routing)")
    try:
        fallbacks = [Route(f["provider"], f["model"]) for f in row["fallbacks"]]
    except (TypeError, KeyError) as exc:
        raise AIError(f"feature {feature!r}: fallbacks must be a list of "
                      f'{{"provider": ..., "model": ...}}, got {row["fallbacks"]!r}') from exc
    return FeatureRouting(feature, [Route(row["provider"], row["model"]), *fallbacks],
                          float(row["timeout_s"]), bool(row["json_output"]))


ROUTING_TTL_S = 30.0  # routing is data: an edit applies within this, with no restart
_routing_cache: dict[str, tuple[float, FeatureRouting]] = {}


def routing_for(feature: str) -> FeatureRouting:
    """`load_routing`, read at most once per ROUTING_TTL_S per process (a hot path)."""
    hit = _routing_cache.get(feature)
    if hit and time.monotonic() - hit[0] < ROUTING_TTL_S:
        return hit[1]
    routing = load_routing(feature)
    _routing_cache[feature] = (time.monotonic(), routing)
    return routing


def complete(feature: str, messages: list[dict[str, Any]], *, routing: FeatureRouting | None = None,
             temperature: float = 0.0, max_tokens: int | None = None) -> Completion | None:
    """The first route's answer that succeeds, or None (then see `last_failure()`)."""
    _last_failure.set(None)
    routing = routing or routing_for(feature)

    def call(provider: Provider, route: Route, settings: Settings) -> tuple[str, int, int]:
        text, tokens_in, tokens_out = provider.complete(
            route.model, messages, routing.timeout_s, routing.json_output, temperature, max_tokens,
            settings=settings)
        if not text.strip():
            raise AIError("empty answer")
        return text, tokens_in, tokens_out

    answer = _first_success(routing, "complete", call)
    if answer is None:
        return None
    (text, tokens_in, tokens_out), route, duration = answer
    log.info("ai_complete", feature=feature, provider=route.provider, model=route.model,
             input_tokens=tokens_in, output_tokens=tokens_out, duration_s=round(duration, 3))
    return Completion(text, route.provider, route.model, tokens_in, tokens_out, duration, feature)


def embed(feature: str, texts: list[str], *, routing: FeatureRouting | None = None) -> Embedding | None:
    """One vector per text from the first route that succeeds, or None (see `last_failure()`)."""
    _last_failure.set(None)
    if not texts:
        raise ValueError("embed() needs at least one text")
    routing = routing or routing_for(feature)

    def call(provider: Provider, route: Route, settings: Settings) -> tuple[list[list[float]], int]:
        vectors, tokens_in = provider.embed(route.model, texts, routing.timeout_s, settings=settings)
        if len(vectors) != len(texts) or not all(vectors):
            raise AIError(f"{len(vectors)} vectors for {len(texts)} texts")
        return vectors, tokens_in

    answer = _first_success(routing, "embed", call)
    if answer is None:
        return None
    (vectors, tokens_in), route, duration = answer
    log.info("ai_embed", feature=feature, provider=route.provider, model=route.model,
             texts=len(texts), dimension=len(vectors[0]), input_tokens=tokens_in,
             duration_s=round(duration, 3))
    return Embedding(vectors, route.provider, route.model, tokens_in, duration, feature)


def _first_success(routing: FeatureRouting, kind: str,
                   call: Callable[[Provider, Route, Settings], T]) -> tuple[T, Route, float] | None:
    settings = get_settings()
    attempts: list[str] = []
    for route in routing.routes:
        provider = PROVIDERS[route.provider]
        reason = provider.available(settings)
        if reason is None:
            start = time.monotonic()
            try:
                return call(provider, route, settings), route, time.monotonic() - start
            except NotImplementedError:
                reason = f"unsupported ({kind})"
            # Any failure of one route is a reason to try the next (SPEC §10); it is not
            # swallowed: every attempt ends up in last_failure() and in the log.
            except Exception as exc:
                detail = _short(str(exc), settings)
                reason = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
        else:
            reason = f"skipped, {reason}"
        attempts.append(f"{route}: {reason}")
        log.warning("ai_route_failed", feature=routing.feature, kind=kind, route=str(route),
                    reason=reason)
    failure = "; ".join(attempts)
    _last_failure.set(failure)
    log.error("ai_all_routes_failed", feature=routing.feature, kind=kind, failure=failure)
    return None


def _short(message: str, settings: Settings) -> str:
    """One line, bounded, and scrubbed of any key value an SDK might have echoed."""
    for secret in secrets.values(settings):
        message = message.replace(secret, "[redacted]")
    message = " ".join(message.split())
    return message if len(message) <= MAX_REASON_CHARS else message[:MAX_REASON_CHARS - 1] + "…"
