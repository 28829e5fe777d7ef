"""The approval policy as data (approval-policy.toml): which first launches wait for the
founder's OK. Each rule has a name (audited, as the guard rails' are) and its parameters."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class PolicyError(ValueError):
    """The policy file does not load: its path, the key and what it accepts."""


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = False


class _Below(_Rule):
    below: Annotated[float, Field(ge=0, le=1)] = 0.8


class _Share(_Rule):
    share: Annotated[float, Field(gt=0, le=1)] = 0.5


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_plan: _Rule = _Rule()
    first_launch: _Rule = _Rule()
    low_confidence: _Below = _Below()
    spend_share: _Share = _Share()
    wide_tools: _Rule = _Rule()
    # Before a deploy (not a launch): on unless the file turns it off, since what it guards is
    # the fleet's own host; an older policy file that does not name it keeps it.
    touches_deploy: _Rule = _Rule(enabled=True)


@dataclass(frozen=True)
class LaunchFacts:
    """What a rule may look at, read before the claim."""
    intent: str
    complexity: str
    first_launch: bool  # no launch yet for this client (or no client known)
    confidence: float | None
    estimated_usd: float
    spent_today_usd: float
    daily_cap_usd: float
    tools_wider_than_lean: bool


@dataclass(frozen=True)
class Asked:
    rule: str  # audited as the rule's name
    why: str   # said to the founder


def load(path: Path) -> Policy:
    """The policy in `path`, read again when the file changes (no restart needed)."""
    path = Path(path).resolve()
    try:
        changed = path.stat().st_mtime_ns
    except OSError:
        changed = None
    return _load(path, changed)


@lru_cache(maxsize=4)
def _load(path: Path, changed: int | None) -> Policy:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return Policy.model_validate(data)
    except OSError as exc:
        raise PolicyError(f"approval policy {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"approval policy {path}: not TOML ({exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PolicyError(f"approval policy {path}: {where}: {first['msg']}") from None


def evaluate(p: Policy, f: LaunchFacts) -> Asked | None:
    """The first enabled rule the launch matches, in the file's order; None: it goes."""
    if p.run_plan.enabled and f.intent == "run" and f.complexity == "plan":
        return Asked("approval_rule_run_plan", "run + plan: un travail transverse")
    if p.first_launch.enabled and f.first_launch:
        return Asked("approval_rule_first_launch", "premier lancement pour ce client")
    if p.low_confidence.enabled and (f.confidence or 0.0) < p.low_confidence.below:
        return Asked("approval_rule_low_confidence",
                     f"confiance du classement {f.confidence or 0.0:.2f} < {p.low_confidence.below:.2f}")
    limit = p.spend_share.share * f.daily_cap_usd
    if p.spend_share.enabled and f.spent_today_usd + f.estimated_usd > limit:
        return Asked("approval_rule_spend_share",
                     f"dépense du jour {f.spent_today_usd:.2f} + {f.estimated_usd:.2f} USD > "
                     f"{p.spend_share.share:.0%} du plafond ({limit:.2f} USD)")
    if p.wide_tools.enabled and f.tools_wider_than_lean:
        return Asked("approval_rule_wide_tools", "outils plus larges que le jeu léger")
    return None
