"""The classifier's output schema: anything else is a validation failure, never a guess."""
from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Intent = Literal["run", "question", "noise", "negociation", "conseil"]
Complexity = Literal["leger", "plan"]


class ClassificationInvalid(ValueError):
    """The LLM's answer is not a valid classification; carries a short reason."""


class Classification(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    intent: Intent
    complexity: Complexity
    # strict: "0.9" or true are not confidences
    confidence: float = Field(ge=0.0, le=1.0, strict=True)
    rationale: str = Field(default="", max_length=2000)

    @model_validator(mode="before")
    @classmethod
    def _leger_outside_run(cls, data: object) -> object:
        """SPEC §6: complexity means something only for `run`, and is `leger` otherwise, so
        its absence there is no failure. A `run` must say which (leger or plan)."""
        if isinstance(data, dict) and data.get("intent") != "run" and data.get("complexity") is None:
            return {**data, "complexity": "leger"}
        return data


def parse_output(text: str) -> Classification:
    """Validate the raw answer text; raises ClassificationInvalid with the reason."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ClassificationInvalid(f"not JSON: {exc}"[:200]) from None
    if not isinstance(data, dict):
        raise ClassificationInvalid(f"not a JSON object: {type(data).__name__}")
    if isinstance(data.get("confidence"), int) and not isinstance(data.get("confidence"), bool):
        data["confidence"] = float(data["confidence"])  # 1 and 0 are fine confidences
    try:
        return Classification.model_validate(data)
    except ValidationError as exc:
        reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ClassificationInvalid(reason[:300]) from None
