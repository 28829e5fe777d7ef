"""System prompt selection, turn cap, and the argument-size limit."""
import pytest

from synedre.spawn import prompt


@pytest.mark.parametrize("intent,complexity,kind,turns", [
    ("run", "leger", "lean", 40), ("run", "plan", "plan", None), ("question", "leger", "rich", None),
    ("negociation", "leger", "rich", None), ("conseil", "leger", "rich", None), (None, None, "rich", None),
])
def test_system_prompt_and_turn_cap(intent, complexity, kind, turns):
    choice = prompt.system_prompt(intent, complexity, "PERSONA-TEXT")
    assert (choice.kind, choice.max_turns) == (kind, turns)
    assert prompt.CONTRACT_PATH in choice.text and "git stash" in choice.text
    assert ("PERSONA-TEXT" in choice.text) is (kind != "lean")
    assert ("regression test" in choice.text) is (kind == "plan")


def test_a_huge_thread_is_truncated_under_the_argument_limit_and_says_so():
    text = prompt.user_prompt(message_ref="<m@x>", client="garage-martin (envelope)", intent="run",
                              complexity="plan", confidence=0.9, rationale="r", cover="Bonjour",
                              quoted="é" * 400_000, attachments=["a.png"])
    assert len(text.encode()) <= prompt.MAX_PROMPT_BYTES
    assert "thread was truncated" in text and "Bonjour" in text and "a.png" in text
    small = prompt.user_prompt(message_ref="<m@x>", client="unknown", intent="question", complexity="leger",
                               confidence=0.5, rationale="", cover="c", quoted="", attachments=[])
    assert "thread was truncated" not in small and "No attachments." in small
