"""Transcript compaction (SPEC §11): shrink a stored Claude Code stream-json transcript
for the iteration prompt and for stored history, keeping the last turn byte for byte.

Everything before the last turn is compacted:
- `stream_event` partials go (the complete assistant messages repeat them);
- thinking blocks go, and so do per-event bookkeeping keys (uuid, session, usage);
- tool outputs lose ANSI escapes, carriage-return redraws, spinner frames and all but
  the final state of a progress bar, then are cut head/tail past a line threshold;
- a successful command with no warning word becomes a one-line sentinel (these two:
  `terminal_output`);
- a validated milestone (a failing call retried until the same call succeeds) becomes
  one `{"type": "milestone", "summary", "turns", "tool_use_ids"}` entry, where a turn is
  one tool call (Claude Code's own unit) and the ids name every call it replaces.

`compact` is idempotent: every rule is a projection, and the milestone window is counted
in tool calls, which a milestone entry keeps as its `turns`, so a second pass finds
nothing new to collapse.
"""
from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from synedre.orchestrate.terminal_output import (
    OK_SENTINEL,
    WARNING,
    clean_terminal,
    compact_output,
    truncate_lines,
)

# A milestone spans at most this many tool calls ("a batch of ~10 trial-and-error turns"):
# a failure fixed an hour later is history worth reading, not noise.
MILESTONE_MAX_CALLS = 12
COMMAND_TOOLS = frozenset({"Bash"})
EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})

THINKING = ("thinking", "redacted_thinking")
# Per-event bookkeeping with no meaning for the next run (tool_use_result duplicates
# the tool_result block's content).
DROP_KEYS = frozenset({"uuid", "session_id", "timestamp", "tool_use_result"})

_ERROR_LINE = re.compile(r"error|exception|traceback", re.IGNORECASE)
_EXIT_LINE = re.compile(r"^(?:error:\s*)?exit code \d+$", re.IGNORECASE)
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


# --- events ------------------------------------------------------------------------------

def _type(ev: Any) -> Any:
    return ev.get("type") if isinstance(ev, dict) else None


def _blocks(ev: Any, kind: str) -> list[dict]:
    """The content blocks of an `assistant` or `user` event; [] for anything else."""
    if _type(ev) != kind or not isinstance(ev.get("message"), dict):
        return []
    content = ev["message"].get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _message_id(ev: Any) -> str | None:
    mid = ev["message"].get("id") if isinstance(ev.get("message"), dict) else None
    return mid if isinstance(mid, str) else None


def _tail_start(events: list) -> int:
    """Index of the last turn: the last assistant message (Claude Code writes one event
    per content block, sharing the message id) and everything after it."""
    last = max((i for i, ev in enumerate(events) if _type(ev) == "assistant"), default=None)
    if last is None:
        return len(events)
    mid, start = _message_id(events[last]), last
    j = last - 1
    while mid is not None and j >= 0:
        if _type(events[j]) == "assistant" and _message_id(events[j]) == mid:
            start = j
        elif _type(events[j]) != "stream_event":
            break
        j -= 1
    return start


@dataclass(frozen=True)
class _Call:
    id: str
    name: str
    input: Any
    event: int                 # index of the assistant event holding the tool_use
    result_event: int | None   # index of the user event holding its tool_result
    failed: bool
    output: str

    @property
    def signature(self) -> str:
        """What makes two calls "the same attempt": the tool and, for a command, its
        first two words (`npm test`, `npx vue-tsc`); else the file or pattern. Only the
        first line counts, which a head/tail cut never changes."""
        inp = self.input if isinstance(self.input, dict) else {}
        if self.name in COMMAND_TOOLS and isinstance(inp.get("command"), str):
            first = re.split(r"&&|;|\|\|", inp["command"].split("\n", 1)[0])[-1].split("|", 1)[0]
            words = [w for w in first.split() if not _ENV_ASSIGN.match(w)]
            return f"{self.name}:{' '.join(words[:2])}"
        key = next((inp[k] for k in ("file_path", "path", "pattern", "url")
                    if isinstance(inp.get(k), str)), "")
        return f"{self.name}:{key.split(chr(10), 1)[0]}"

    def describe(self) -> str:
        inp = self.input if isinstance(self.input, dict) else {}
        if isinstance(inp.get("command"), str):
            return inp["command"].split("\n", 1)[0][:120]
        return f"{self.name} {inp.get('file_path', '')}".strip()


def _result_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = []
    for item in content:
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        else:
            kind = item.get("type", "block") if isinstance(item, dict) else type(item).__name__
            parts.append(f"[{kind} not shown]")
    return "\n".join(parts)


class _Index:
    """Tool calls and their results. An id used by more than one tool_use or tool_result
    is ambiguous: its calls are never collapsed nor given the sentinel, so that which
    block an id designates cannot change between two passes."""

    def __init__(self, events: list, prefix_end: int):
        uses = Counter(b.get("id") for ev in events for b in _blocks(ev, "assistant")
                       if b.get("type") == "tool_use" and isinstance(b.get("id"), str))
        results = Counter(b.get("tool_use_id") for ev in events for b in _blocks(ev, "user")
                          if b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str))
        self.ambiguous = {i for i in {*uses, *results} if uses[i] > 1 or results[i] > 1}
        self.names = {b["id"]: b["name"] for ev in events for b in _blocks(ev, "assistant")
                      if b.get("type") == "tool_use" and isinstance(b.get("id"), str)
                      and b["id"] not in self.ambiguous and isinstance(b.get("name"), str)}
        result_at = {b["tool_use_id"]: (i, b) for i, ev in enumerate(events[:prefix_end])
                     for b in _blocks(ev, "user") if b.get("type") == "tool_result"
                     and isinstance(b.get("tool_use_id"), str) and b["tool_use_id"] not in self.ambiguous}
        self.calls: list[_Call] = []
        # weight[i]: tool calls inside event i, a milestone entry counting its own
        self.cumulative = [0]
        for i, ev in enumerate(events[:prefix_end]):
            uses_here = [b for b in _blocks(ev, "assistant") if b.get("type") == "tool_use"]
            self.cumulative.append(self.cumulative[-1] + len(uses_here) + _milestone_weight(ev))
            for b in uses_here:
                if not isinstance(b.get("id"), str) or b["id"] not in self.names:
                    continue
                r_event, r_block = result_at.get(b["id"], (None, {}))
                if r_event is not None and r_event <= i:
                    r_event, r_block = None, {}
                self.calls.append(_Call(b["id"], b["name"], b.get("input"), i, r_event,
                                        r_block.get("is_error") is True,
                                        _result_text(r_block.get("content")) or ""))

    def weight(self, start: int, end: int) -> int:
        return self.cumulative[end + 1] - self.cumulative[start]


def _milestone_weight(ev: Any) -> int:
    turns = ev.get("turns") if _type(ev) == "milestone" else None
    return turns if type(turns) is int and turns > 0 else 0


def _range_ids(events: list, start: int, end: int) -> tuple[list[str], set[str]]:
    """tool_use ids collapsed into a range (nested milestones' too), and every id the
    range's tool_use and tool_result blocks mention."""
    kept: list[str] = []
    seen: set[str] = set()
    for ev in events[start:end + 1]:
        for b in _blocks(ev, "assistant"):
            if b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                kept.append(b["id"])
                seen.add(b["id"])
        for b in _blocks(ev, "user"):
            if b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str):
                seen.add(b["tool_use_id"])
        if _type(ev) == "milestone" and isinstance(ev.get("tool_use_ids"), list):
            kept.extend(i for i in ev["tool_use_ids"] if isinstance(i, str))
    return kept, seen


def _milestones(events: list, prefix_end: int, index: _Index) -> dict[int, tuple[int, dict]]:
    """start index → (end index, milestone entry), for each validated trial-and-error run."""
    found: dict[int, tuple[int, dict]] = {}
    calls = index.calls
    k = 0
    while k < len(calls):
        first = calls[k]
        k += 1
        if not first.failed or first.result_event is None:
            continue
        start = first.event
        # the lead-in ("let me run the type check") belongs to the attempt
        while start > 0 and _type(events[start - 1]) in ("assistant", "stream_event") \
                and not any(b.get("type") == "tool_use" for b in _blocks(events[start - 1], "assistant")):
            start -= 1
        for last in calls[k:]:
            if (last.failed or last.result_event is None or last.event <= first.result_event
                    or last.signature != first.signature
                    or index.weight(start, last.result_event) > MILESTONE_MAX_CALLS):
                continue
            ids, seen = _range_ids(events, start, last.result_event)
            if seen & index.ambiguous:
                continue
            inside = [c for c in calls if start <= c.event <= last.result_event]
            found[start] = (last.result_event, {
                "type": "milestone",
                "summary": _summary(inside, last),
                "turns": index.weight(start, last.result_event),
                "tool_use_ids": ids,
            })
            while k < len(calls) and calls[k].event <= last.result_event:
                k += 1
            break
    return found


def _summary(inside: list[_Call], last: _Call) -> str:
    failures = [c for c in inside if c.failed]
    text = (f"Milestone validated: `{last.describe()}` succeeded after "
            f"{len(failures)} failed attempt(s)")
    lines = [ln.strip() for ln in clean_terminal(failures[-1].output).split("\n")]
    # an "...Error:" line says more than a "1 failed" summary line
    lines = [ln for ln in lines if not _EXIT_LINE.match(ln)]
    error = next((ln for ln in lines if _ERROR_LINE.search(ln)),
                 next((ln for ln in lines if WARNING.search(ln)), ""))
    if error:
        text += f"; last error: {error[:160]}"
    ran = [c.describe() for c in inside if c.name in COMMAND_TOOLS and not c.failed and c is not last]
    if ran:
        text += f"; also ran: {'; '.join(ran[:3])}"
    files = sorted({c.input["file_path"] for c in inside if c.name in EDIT_TOOLS
                    and isinstance(c.input, dict) and isinstance(c.input.get("file_path"), str)})
    if files:
        text += f"; files changed: {', '.join(files)}"
    return text + "."


def _compact_block(block: Any, names: dict[str, str]) -> Any:
    if not isinstance(block, dict):
        return block
    if block.get("type") == "tool_result":
        text = _result_text(block.get("content"))
        if text is None:
            return block
        tid = block.get("tool_use_id")
        command = isinstance(tid, str) and names.get(tid) in COMMAND_TOOLS
        return {**block, "content": compact_output(text, command=command,
                                                   failed=block.get("is_error") is True)}
    if block.get("type") == "tool_use" and isinstance(block.get("input"), dict):
        # Write/Edit bodies are in the worktree already; head and tail say which
        return {**block, "input": {k: truncate_lines(v) if isinstance(v, str) else v
                                   for k, v in block["input"].items()}}
    return block


def _compact_event(ev: Any, names: dict[str, str]) -> Any | None:
    """One event before the last turn; None drops it."""
    kind = _type(ev)
    if kind == "stream_event":
        return None
    if kind not in ("assistant", "user") or not isinstance(ev.get("message"), dict):
        return ev
    message = ev["message"]
    content = message.get("content")
    if isinstance(content, list):
        kept = [_compact_block(b, names) for b in content
                if not (kind == "assistant" and isinstance(b, dict) and b.get("type") in THINKING)]
        if content and not kept:
            return None  # a thinking-only event
        content = kept
    slim = {k: v for k, v in ev.items()
            if k not in DROP_KEYS and not (k == "parent_tool_use_id" and v is None)}
    # message id, model, usage, stop reason: bookkeeping, and dropping the id keeps the
    # last turn's boundary where it was on a second pass
    slim["message"] = {k: (content if k == "content" else message[k])
                       for k in ("role", "content") if k in message}
    return slim


def compact(events: Iterable[dict]) -> list[dict]:
    """The compacted transcript; the last turn is returned unchanged (a deep copy)."""
    evs = copy.deepcopy(list(events))
    tail = _tail_start(evs)
    index = _Index(evs, tail)
    ranges = _milestones(evs, tail, index)
    out: list = []
    i = 0
    while i < tail:
        if i in ranges:
            end, milestone = ranges[i]
            out.append(milestone)
            i = end + 1
            continue
        ev = _compact_event(evs[i], index.names)
        if ev is not None:
            out.append(ev)
        i += 1
    return out + evs[tail:]


# --- text view ---------------------------------------------------------------------------

def render(events: Iterable[dict]) -> str:
    """A compact text view of a transcript for the iteration prompt (compacts first;
    compacting twice changes nothing)."""
    lines: list[str] = []
    for ev in compact(events):
        kind = _type(ev)
        if kind == "assistant":
            for b in _blocks(ev, "assistant"):
                lines.extend(_render_assistant_block(b))
        elif kind == "user":
            content = ev["message"].get("content") if isinstance(ev.get("message"), dict) else None
            if isinstance(content, str):
                lines.append(f"user: {content}")
            for b in _blocks(ev, "user"):
                lines.extend(_render_user_block(b))
        elif kind == "milestone":
            lines.append(f"✓ milestone ({ev.get('turns')} calls): {ev.get('summary')}")
        elif kind == "system" and ev.get("subtype") == "init":
            lines.append(f"[session {ev.get('session_id')} · model {ev.get('model')}]")
        elif kind == "result":
            lines.append(f"[result {ev.get('subtype')} · is_error={ev.get('is_error')} · "
                         f"turns={ev.get('num_turns')}]")
    return "\n".join(lines)


def _render_assistant_block(b: dict) -> list[str]:
    if b.get("type") == "text":
        return [f"assistant: {b.get('text')}"]
    if b.get("type") in THINKING:
        return [f"(thinking) {b.get('thinking', '')}"]
    if b.get("type") == "tool_use":
        inp = b.get("input")
        inp = inp if isinstance(inp, dict) else {}
        what = inp.get("command") or inp.get("file_path") or inp.get("pattern") \
            or json.dumps(inp, ensure_ascii=False, default=str)[:200]
        return [f"→ {b.get('name')}: {what}"]
    return []


def _render_user_block(b: dict) -> list[str]:
    if b.get("type") == "text":
        return [f"user: {b.get('text')}"]
    if b.get("type") != "tool_result":
        return []
    text = _result_text(b.get("content")) or ""
    status = "error" if b.get("is_error") is True else "ok"
    if text == OK_SENTINEL:
        return [f"← {OK_SENTINEL}"]
    if not text:
        return [f"← {status} (no output)"]
    return [f"← {status}:", *(f"    {line}" for line in text.split("\n"))]
