"""The contract file the coding agent writes (SPEC §8, §9.1–3).

Reading never raises: a missing, empty, invalid or half-written file becomes a
`ContractResult` whose `errors` say what went wrong, and the decisions below are plain
functions of the classified intent/complexity and the contract.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from synedre.classify.schema import Complexity, Intent

# Intents the agent may report to downgrade (never noise: it was already launched).
DOWNGRADE_INTENTS = frozenset({"run", "question", "negociation", "conseil"})
MAX_ERROR_CHARS = 300



class CodePath(StrEnum):
    """SPEC §9.3: where a run + plan goes after its launch."""
    DEPLOY = "deploy"
    ANALYSIS = "no_code_analysis"  # no tenant, no commits: a legitimate analysis deliverable
    # commits with nowhere to deploy or test them: an anomaly, the message fails
    MISSING_TENANT_OR_ROUTES = "orchestration_failed:missing_tenant_or_routes"


def _clean_list(values: list[str]) -> list[str]:
    return [v.strip() for v in values if v.strip()]


class LeanContract(BaseModel):
    """Written under the lean RUN prompt (run + leger). Absent fields take safe defaults."""
    # strict: JSON already gives exact types, so "true" or 1 for ok is the agent's mistake
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    ok: bool = False
    tenant: str | None = None
    commits: list[str] = []
    summary_md: str = ""
    lessons_applied: list[int] = []  # the ids of the LESSONS entries it applied (SPEC §9.8)

    @field_validator("tenant")
    @classmethod
    def _blank_tenant_is_none(cls, v: str | None) -> str | None:
        return (v.strip() or None) if v is not None else None

    @field_validator("commits")
    @classmethod
    def _drop_blank_commits(cls, v: list[str]) -> list[str]:
        return _clean_list(v)


class RichContract(LeanContract):
    """Written under the rich and plan prompts; intent/complexity let the agent, who read
    the whole thread, downgrade the classification toward no-code."""
    routes_to_qa: list[str] = []
    draft_reply_for_user: str | None = None
    intent: Intent | None = None
    complexity: Complexity | None = None

    @field_validator("routes_to_qa")
    @classmethod
    def _drop_blank_routes(cls, v: list[str]) -> list[str]:
        return _clean_list(v)

    @field_validator("draft_reply_for_user")
    @classmethod
    def _blank_draft_is_none(cls, v: str | None) -> str | None:
        return v if v is not None and v.strip() else None


_MODELS: dict[str, type[LeanContract]] = {"lean": LeanContract, "rich": RichContract}


@dataclass(frozen=True)
class ContractResult:
    contract: LeanContract | None
    errors: list[str] = field(default_factory=list)
    # True when the JSON was cut (a timeout mid-write) and only its complete members were kept
    partial: bool = False

    @property
    def valid(self) -> bool:
        """SPEC §8's "the contract file validates": read whole, without any error."""
        return self.contract is not None and not self.errors and not self.partial


def read_contract(path_or_text: Path | str, kind: Literal["lean", "rich"]) -> ContractResult:
    """A `Path` is read from disk; a `str` is the file's text itself."""
    model = _MODELS[kind]  # an unknown kind is a caller bug, not bad agent output
    if isinstance(path_or_text, Path):
        try:
            # a cut may split a UTF-8 sequence; the salvage drops that member anyway
            text = path_or_text.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ContractResult(None, [f"contract file missing: {path_or_text}"])
        except OSError as exc:
            return ContractResult(None, [_short(f"contract file unreadable: {exc}")])
    else:
        text = path_or_text
    if not text.strip():
        return ContractResult(None, ["contract file is empty"])

    errors: list[str] = []
    partial = False
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        data = _salvage(text)
        if not data:
            return ContractResult(None, [_short(f"invalid JSON: {exc}")])
        partial = True
        errors.append(_short(f"incomplete JSON ({exc}); kept {len(data)} complete member(s): "
                             + ", ".join(data)))
    if not isinstance(data, dict):
        return ContractResult(None, [f"contract is a JSON {type(data).__name__}, not an object"])
    contract, problems = _validate(model, data)
    return ContractResult(contract, errors + problems, partial)


_WS = re.compile(r"\s*")


def _skip_ws(text: str, i: int = 0) -> int:
    """The index of the first non-blank character from `i` on."""
    m = _WS.match(text, i)
    assert m is not None  # `\s*` matches everywhere, if only the empty string
    return m.end()


def _salvage(text: str) -> dict:
    """The complete top-level members of a JSON object cut short, in order; {} if none."""
    decoder = json.JSONDecoder()
    out: dict = {}
    i = _skip_ws(text)
    if text[i:i + 1] != "{":
        return out
    i += 1
    while True:
        try:
            key, i = decoder.raw_decode(text, _skip_ws(text, i))
            i = _skip_ws(text, i)
            if not isinstance(key, str) or text[i:i + 1] != ":":
                return out
            value, i = decoder.raw_decode(text, _skip_ws(text, i + 1))
        except (ValueError, RecursionError):
            return out
        out[key] = value
        i = _skip_ws(text, i)
        if text[i:i + 1] != ",":
            return out
        i += 1


def _validate(model: type[LeanContract], data: dict) -> tuple[LeanContract, list[str]]:
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        details = exc.errors()
    errors = [_short(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}") for e in details]
    # A field of the wrong type falls back to its safe default; the rest still counts
    # (a summary is worth having in the founder's alert even when `commits` is garbage).
    bad = {e["loc"][0] for e in details if e["loc"]}
    kept = {k: v for k, v in data.items() if k not in bad}
    return model.model_validate(kept), errors


def _short(message: str) -> str:
    return message if len(message) <= MAX_ERROR_CHARS else message[:MAX_ERROR_CHARS - 1] + "…"


def is_no_code(intent: str | None, complexity: str | None) -> bool:
    """SPEC §9.2: only run + plan takes the code path (deploy, QA); anything else —
    question/negociation/conseil, run + leger, or an unknown intent — skips it."""
    return not (intent == "run" and complexity == "plan")


def apply_downgrade(classified_intent: str | None, classified_complexity: str | None,
                    contract: LeanContract | None) -> tuple[str | None, str | None]:
    """SPEC §9.1: the agent may move the message toward no-code, never away from it;
    a downgrade forces complexity to leger."""
    if contract is None or is_no_code(classified_intent, classified_complexity):
        return classified_intent, classified_complexity
    intent = getattr(contract, "intent", None) or classified_intent
    complexity = getattr(contract, "complexity", None) or classified_complexity
    if intent in DOWNGRADE_INTENTS and is_no_code(intent, complexity):
        return intent, "leger"
    return classified_intent, classified_complexity


def code_path_decision(contract: LeanContract) -> CodePath:
    """SPEC §9.3, for run + plan. Commits without somewhere to deploy and test them is an
    anomaly; no tenant and no commits is a legitimate analysis deliverable."""
    routes = getattr(contract, "routes_to_qa", [])
    if contract.commits and not (contract.tenant and routes):
        return CodePath.MISSING_TENANT_OR_ROUTES
    if not contract.tenant and not contract.commits:
        return CodePath.ANALYSIS
    return CodePath.DEPLOY


def contract_of(launch: dict[str, Any]) -> LeanContract:
    """The launch's stored contract (validated at the launch), with safe defaults if absent."""
    model = LeanContract if launch.get("system_prompt") == "lean" else RichContract
    return model.model_validate(launch.get("contract") or {})
