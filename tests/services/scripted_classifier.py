"""The corpus's scripted LLM: answers each prompt from cases.json by its SYN-CASE-<id>."""
from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from pathlib import Path

from tests.services.llm_server import HTTPError

CASE_REF = re.compile(r"SYN-CASE-(P\d+)")


def chat_prompt(body: dict, path: str) -> str | None:
    """A chat completion request's messages as one text; None for any other request."""
    if not path.endswith("/chat/completions"):
        return None
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


class CaseScript:
    def __init__(self, cases_file: Path):
        self.cases = {c["id"]: c for c in json.loads(Path(cases_file).read_text())}
        self.calls: dict[str, list[dict]] = defaultdict(list)  # case -> request bodies
        self.unexpected: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict, path: str):
        if (text := chat_prompt(body, path)) is None:
            return None
        found = CASE_REF.search(text)
        if not found or found.group(1) not in self.cases:
            self.unexpected.append(text[:200])
            raise HTTPError(400, "no case reference in the prompt")
        case = found.group(1)
        with self._lock:
            self.calls[case].append(body)
            n = len(self.calls[case])
        answer = self.cases[case]["llm"]
        if answer is None:
            self.unexpected.append(f"{case}: the LLM must not be called")
            raise HTTPError(400, f"{case} must not reach the LLM")
        if isinstance(answer, list):
            answer = answer[min(n, len(answer)) - 1]
        if isinstance(answer, str):
            return answer[len("RAW:"):] if answer.startswith("RAW:") else answer
        return json.dumps(answer)
