"""The launch's system prompt, turn cap and prompt (SPEC §8), from templates in prompts/."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from string import Template

from synedre import ROOT

VERSION = "v1"
CONTRACT_PATH = ".synedre/contract.json"
LEAN_MAX_TURNS = 40
# The OS refuses a single argument over 128 KiB; keep a margin for the encoding.
MAX_PROMPT_BYTES = 120 * 1024


@lru_cache
def _template(name: str) -> Template:
    return Template((ROOT / "prompts" / f"launch.{name}.{VERSION}.txt").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class SystemChoice:
    kind: str  # lean | plan | rich
    text: str
    max_turns: int | None


def system_prompt(intent: str | None, complexity: str | None, persona: str) -> SystemChoice:
    """run+leger → lean, capped; run+plan → rich + plan addendum; anything else → rich,
    uncapped (fail open: a misclassified run must not be cut short)."""
    if intent == "run" and complexity == "plan":
        text = _template("rich").substitute(contract_path=CONTRACT_PATH, persona=persona) + \
            _template("plan").template
        return SystemChoice("plan", text, None)
    if intent == "run":
        return SystemChoice("lean", _template("lean").substitute(contract_path=CONTRACT_PATH), LEAN_MAX_TURNS)
    return SystemChoice("rich", _template("rich").substitute(contract_path=CONTRACT_PATH, persona=persona), None)


def user_prompt(*, message_ref: str, client: str, intent: str, complexity: str, confidence: float,
                rationale: str, cover: str, quoted: str, attachments: list[str],
                infrastructure: str | None = None) -> str:
    email = f"--- what the sender wrote ---\n{cover}\n"
    if quoted:
        email += f"--- quoted / forwarded thread ---\n{quoted}\n"
    fixed = _template("user").substitute(
        message_ref=message_ref, client=client, intent=intent, complexity=complexity,
        confidence=f"{confidence:.2f}", rationale=rationale or "", email="$email",
        attachments=("Attachments (scanned clean): " + ", ".join(attachments)) if attachments
        else "No attachments.",
        infrastructure=f"\nInfrastructure:\n{infrastructure}" if infrastructure else "")
    room = MAX_PROMPT_BYTES - len(fixed.encode())
    data = email.encode()
    if len(data) > room:
        note = "\n[... the thread was truncated here to fit the command line; ask for nothing more, " \
               "work from what is above ...]\n"
        email = data[:max(0, room - len(note.encode()))].decode("utf-8", "ignore") + note
    return fixed.replace("$email", email, 1)
