"""Classify one email: short-circuits, one LLM call (one retry), then the guard rails."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from synedre.ai import Completion
from synedre.classify import prompt as prompts, rules as guard
from synedre.classify.schema import Classification, ClassificationInvalid, parse_output
from synedre.pipeline import Status

MAX_ATTEMPTS = 2  # one retry on an invalid answer, then classify_failed


class LLMUnavailable(RuntimeError):
    """No provider answered (transient): retry the stage later, never guess."""


@dataclass
class ClassifyOutcome:
    status: Status  # classified | classify_failed
    classification: Classification | None
    model: str | None
    audits: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    llm_calls: int = 0


Ask = Callable[[list[dict[str, str]]], Completion | None]
Unavailable = Callable[[], str | None]


def classify(facts: guard.Facts, p: prompts.PromptInput, ask: Ask,
             why_unavailable: Unavailable = lambda: None) -> ClassifyOutcome:
    for pre in guard.PRE_LLM:
        if pre.check(facts):
            c = Classification(intent="noise", complexity="leger", confidence=1.0,
                               rationale=pre.description)
            return ClassifyOutcome(Status.CLASSIFIED, c, f"rule:{pre.name}",
                                   [(pre.name, {}), (Status.CLASSIFIED, _detail(c, f"rule:{pre.name}"))])

    messages, _token = prompts.build(p)
    out = ClassifyOutcome(Status.CLASSIFY_FAILED, None, None)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        answer = ask(messages)
        if answer is None:
            raise LLMUnavailable(why_unavailable() or "no provider answered")
        out.llm_calls += 1
        out.model = f"{answer.provider}/{answer.model}"
        try:
            c = parse_output(answer.text)
            break
        except ClassificationInvalid as exc:
            out.audits.append(("classification_invalid", {"attempt": attempt, "reason": str(exc),
                                                          "model": out.model}))
            messages = [*messages, {"role": "assistant", "content": answer.text[:2000]},
                        {"role": "user", "content": f"That answer is invalid ({exc}). Answer again "
                                                    "with only the JSON object described above."}]
    else:
        out.audits.append((Status.CLASSIFY_FAILED, {"reason": "invalid_output", "attempts": MAX_ATTEMPTS}))
        return out

    for rule in guard.AFTER_LLM:
        changed = rule.apply(facts, c)
        if changed is not None:
            out.audits.append((rule.name, {"from": [c.intent, c.complexity], "to": [changed.intent, changed.complexity],
                                           "confidence": c.confidence}))
            c = changed
    out.status, out.classification = Status.CLASSIFIED, c
    out.audits.append((Status.CLASSIFIED, {**_detail(c, out.model), "prompt_version": prompts.PROMPT_VERSION}))
    return out


def _detail(c: Classification, model: str | None) -> dict[str, Any]:
    return {"intent": c.intent, "complexity": c.complexity, "confidence": c.confidence, "model": model}
