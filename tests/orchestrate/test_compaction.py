"""Transcript compaction (SPEC §11): each rule alone, then a realistic 40-turn session."""
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from synedre.orchestrate.compaction import MILESTONE_MAX_CALLS, compact, render
from synedre.orchestrate.terminal_output import (
    HEAD_LINES,
    OK_SENTINEL,
    TAIL_LINES,
    TRUNCATE_OVER_LINES,
    clean_terminal,
    truncate_lines,
)
from synedre.redact import Redactor
from synedre.spawn.reassembly import Reassembler
from tests.orchestrate.transcripts import coding_session

pytestmark = pytest.mark.timeout(60)
MARKER = re.compile(r"\[\.\.\. (\d+) lines omitted \.\.\.\]")


@pytest.fixture(scope="module")
def session():
    t = coding_session()
    return t, compact(t.events)


class _Rows:
    """The launcher's writer, keeping the payloads it would insert into launch_events."""

    def __init__(self):
        self.payloads: list[dict] = []

    def add(self, batch):
        self.payloads.extend(payload for _, payload in batch)


def as_stored(events: list[dict]) -> list[dict]:
    """`events` as launch_events holds them: through the launcher's own `Reassembler` (the CLI's
    NDJSON lines reassembled, each partial's delta stripped to its length, redacted), one
    row per event, partials included. What iterations.py reads back and compacts."""
    rows = _Rows()
    stream = Reassembler(Redactor(), None, rows.add, None)
    stream.handle(stream.reader.feed(b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n"
                                              for e in events)))
    stream.handle(stream.reader.close())
    assert len(rows.payloads) == len(events)
    return rows.payloads


def approx_tokens(obj) -> int:
    """Roughly 4 characters of JSON per token (Claude's tokenizers on English and code):
    coarse, but the same yardstick before and after, which is all a ratio needs."""
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, default=str)
    return (len(text) + 3) // 4


def results(events):
    """tool_use id → tool_result block, over user events."""
    return {b["tool_use_id"]: b for ev in events if ev.get("type") == "user"
            for b in ev["message"]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"}


def uses(events):
    return {b["id"]: b for ev in events if ev.get("type") == "assistant"
            for b in ev["message"]["content"] if b.get("type") == "tool_use"}


def strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)


# --- one rule at a time ----------------------------------------------------------------------

def bash(tid, command, mid=None):
    return {"type": "assistant", "message": {"id": mid or f"m-{tid}", "role": "assistant", "content": [
        {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": command}}]}}


def result(tid, text, error=False):
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tid, "content": text, "is_error": error}]}}


def final(text="done"):
    return {"type": "assistant", "message": {"id": "m-final", "role": "assistant", "content": [
        {"type": "thinking", "thinking": "all good"}, {"type": "text", "text": text}]}}


def test_carriage_return_redraws_keep_only_the_final_state_of_each_line():
    assert clean_terminal("Downloading 10%\rDownloading 55%\rDownloading 100%\ndone") == "Downloading 100%\ndone"
    assert clean_terminal("\x1b[2K\x1b[1Gtransforming (1)\x1b[2K\x1b[1G✓ 812 modules") == "✓ 812 modules"


def test_ansi_colours_cursor_moves_and_hyperlinks_are_stripped():
    text = "\x1b[1m\x1b[31mFAIL\x1b[0m x\x1b[3A \x1b]8;;https://x.io\x07link\x1b]8;;\x07 \x1b(B\x1b=ok"
    assert clean_terminal(text) == "FAIL x link ok"


def test_spinner_frames_are_dropped_and_a_progress_bar_keeps_its_last_state():
    text = "start\n⠋ resolving\n⠙ resolving\n|■■■■■       | 40%\n|■■■■■■■■■■■| 100%\nend"
    assert clean_terminal(text) == "start\n|■■■■■■■■■■■| 100%\nend"


def test_pytest_progress_lines_are_not_mistaken_for_progress_bars():
    text = "tests/test_a.py ....F...  [ 45%]\ntests/test_b.py ........  [100%]"
    assert clean_terminal(text) == text


def test_outputs_over_the_threshold_keep_head_and_tail_with_the_omitted_count():
    lines = [f"line {i}" for i in range(TRUNCATE_OVER_LINES + 7)]
    cut = truncate_lines("\n".join(lines)).split("\n")
    assert cut[:HEAD_LINES] == lines[:HEAD_LINES] and cut[-TAIL_LINES:] == lines[-TAIL_LINES:]
    assert cut[HEAD_LINES] == f"[... {len(lines) - HEAD_LINES - TAIL_LINES} lines omitted ...]"
    exact = "\n".join(lines[:TRUNCATE_OVER_LINES])
    assert truncate_lines(exact) == exact


def test_a_quiet_successful_command_becomes_the_sentinel_but_not_a_warning_a_failure_or_a_read():
    read = {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "r", "name": "Read", "input": {"file_path": "a.ts"}}]}}
    events = [bash("a", "git commit -m x"), result("a", "[main 3f2a1b9] x\n 1 file changed"),
              bash("b", "npm ci"), result("b", "npm WARN deprecated inflight@1.0.6"),
              bash("c", "ls docs"), result("c", "ls: cannot access 'docs'", error=True),
              read, result("r", "export const a = 1"), final()]
    out = results(compact(events))
    assert out["a"]["content"] == OK_SENTINEL
    assert out["b"]["content"] == "npm WARN deprecated inflight@1.0.6"
    assert out["c"]["content"] == "ls: cannot access 'docs'"
    assert out["r"]["content"] == "export const a = 1"


def test_thinking_and_partials_go_everywhere_but_in_the_last_turn():
    events = [{"type": "stream_event", "event": {"type": "message_start"}},
              {"type": "assistant", "message": {"id": "m1", "content": [{"type": "thinking", "thinking": "hm"}]}},
              bash("a", "ls", mid="m1"), result("a", "x"), final()]
    out = compact(events)
    assert [e["type"] for e in out] == ["assistant", "user", "assistant"]
    assert out[-1] == final()


def test_a_failure_retried_until_success_becomes_one_milestone():
    events = [bash("a", "npm test"), result("a", "1 failed\nError: boom", error=True),
              {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "e", "name": "Edit",
                                                             "input": {"file_path": "src/x.ts"}}]}},
              result("e", "The file src/x.ts has been updated."),
              bash("b", "npm test -- --run"), result("b", "all passed"), final()]
    out = compact(events)
    assert out[0]["type"] == "milestone" and out[0]["turns"] == 3
    assert out[0]["tool_use_ids"] == ["a", "e", "b"]
    assert "`npm test -- --run` succeeded after 1 failed attempt(s)" in out[0]["summary"]
    assert "Error: boom" in out[0]["summary"] and "src/x.ts" in out[0]["summary"]
    assert out[1:] == [final()]


def test_a_failure_never_fixed_or_fixed_too_late_is_kept():
    never = [bash("a", "npm test"), result("a", "failed", error=True), bash("b", "ls"), result("b", "x"), final()]
    assert not any(e["type"] == "milestone" for e in compact(never))
    filler = [e for i in range(MILESTONE_MAX_CALLS) for e in (bash(f"f{i}", "ls"), result(f"f{i}", "x"))]
    late = [bash("a", "npm test"), result("a", "failed", error=True), *filler,
            bash("b", "npm test"), result("b", "ok"), final()]
    assert not any(e["type"] == "milestone" for e in compact(late))


def test_compact_does_not_mutate_its_input():
    events = [bash("a", "ls"), result("a", "\x1b[31mx\x1b[0m"), final()]
    before = json.dumps(events)
    compact(events)
    assert json.dumps(events) == before


# --- the realistic session -------------------------------------------------------------------

# SPEC §11: "70–90 % fewer tokens". Two baselines, both taken from what launch_events holds:
# - stored: every row, the partials included (`stream_event`s: each repeats, piece by piece,
#   an assistant message stored beside it; stored as envelopes with their deltas' lengths,
#   so they are about half of the stored tokens);
# - conversation: the same rows without the partials, what a model reads.
# The SPEC's range is asserted against the conversation: its floor says enough goes, its
# ceiling that compaction did not cut into what the next run needs. Against what is stored,
# the reduction is over 90 % (about 94 % here), because half of it is partials, which go
# whole. So against that baseline the SPEC's floor is asserted, and the ceiling carried over
# by the partials' share p: 1 - 0.10 (1 - p), beyond which the conversation lost over 90 %.
# That the gap between the two baselines is the partials and nothing else is asserted too.
TARGET_LOW, TARGET_HIGH = 0.70, 0.90


def test_a_realistic_session_meets_the_target_against_the_conversation_and_what_is_stored():
    t = coding_session()
    stored = as_stored(t.events)
    conversation = [e for e in stored if e["type"] != "stream_event"]
    out = compact(stored)  # as iterations.py compacts a launch's rows
    stored_tokens, conversation_tokens = approx_tokens(stored), approx_tokens(conversation)
    after, conversation_after = approx_tokens(out), approx_tokens(compact(conversation))
    of_stored, of_conversation = 1 - after / stored_tokens, 1 - conversation_after / conversation_tokens
    partial_share = 1 - conversation_tokens / stored_tokens
    ceiling = 1 - (1 - TARGET_HIGH) * (1 - partial_share)
    print(f"\n{t.turns} turns: stored {stored_tokens} → {after} tokens ({of_stored:.1%} fewer; partials"
          f" {partial_share:.1%} of it, ceiling {ceiling:.1%}); conversation {conversation_tokens} →"
          f" {conversation_after} ({of_conversation:.1%} fewer); raw CLI stream, deltas' text included"
          f" (not stored) {approx_tokens(t.events)}")
    assert t.turns >= 40
    assert sum(e["type"] == "stream_event" for e in stored) > len(stored) / 2  # partials really stored
    assert TARGET_LOW <= of_conversation <= TARGET_HIGH
    assert TARGET_LOW <= of_stored <= ceiling
    # the two compactions differ by the last turn's partials alone (kept byte for byte)
    tail_partials = [e for e in out if e["type"] == "stream_event"]
    assert [e for e in out if e["type"] != "stream_event"] == compact(conversation)
    assert tail_partials == [e for e in stored[t.last_turn_start:] if e["type"] == "stream_event"]


def test_the_last_turn_is_byte_identical(session):
    t, out = session
    tail = t.events[t.last_turn_start:]
    assert json.dumps(out[-len(tail):], ensure_ascii=False) == json.dumps(tail, ensure_ascii=False)
    assert any(b.get("type") == "thinking" for e in out[-len(tail):] if e["type"] == "assistant"
               for b in e["message"]["content"])


def test_no_thinking_nor_partial_survives_before_the_last_turn(session):
    t, out = session
    prefix = out[:len(out) - (len(t.events) - t.last_turn_start)]
    assert not any(e["type"] == "stream_event" for e in prefix)
    assert not any(b.get("type") == "thinking" for e in prefix if e["type"] == "assistant"
                   for b in e["message"]["content"])


def test_every_tool_use_is_kept_or_named_by_a_milestone(session):
    t, out = session
    collapsed = {i for e in out if e["type"] == "milestone" for i in e["tool_use_ids"]}
    kept = set(uses(out))
    assert set(uses(t.events)) == kept | collapsed and not kept & collapsed
    assert set(results(out)) <= kept   # no result left pointing at nothing


def test_each_trial_and_error_run_becomes_one_milestone(session):
    t, out = session
    milestones = [e for e in out if e["type"] == "milestone"]
    assert [set(m["tool_use_ids"]) for m in milestones] == t.milestones
    assert [m["turns"] for m in milestones] == [len(ids) for ids in t.milestones]
    assert "npm install -D typescript@5.8.3 vue-tsc@2.2.12" in milestones[0]["summary"]
    assert "tsconfig.json" in milestones[0]["summary"]


def test_a_failure_never_retried_survives_as_an_error(session):
    _, out = session
    errors = [b for b in results(out).values() if b["is_error"]]
    assert len(errors) == 1 and "No such file or directory" in errors[0]["content"]


def test_no_ansi_escape_nor_carriage_return_remains(session):
    _, out = session
    assert not any("\x1b" in s or "\r" in s for s in strings(out))


def test_truncation_markers_report_the_omitted_line_counts(session):
    t, out = session
    res, inputs = results(out), uses(out)
    for tid, omitted in t.cut_results.items():
        lines = res[tid]["content"].split("\n")
        assert len(lines) == HEAD_LINES + 1 + TAIL_LINES
        assert lines[HEAD_LINES] == f"[... {omitted} lines omitted ...]"
    for tid, omitted in t.cut_inputs.items():
        assert f"[... {omitted} lines omitted ...]" in inputs[tid]["input"]["content"]
    markers = [m for b in res.values() for m in MARKER.findall(b["content"])]
    assert sorted(map(int, markers)) == sorted(t.cut_results.values())


def test_quiet_successful_commands_become_the_sentinel(session):
    _, out = session
    by_command = {u["input"]["command"]: results(out)[i]["content"] for i, u in uses(out).items()
                  if u["name"] == "Bash"}
    assert by_command["npx playwright install chromium"] == OK_SENTINEL
    assert by_command["npm run build"] == OK_SENTINEL
    assert by_command["npm ci"] != OK_SENTINEL   # it warned


def test_compacting_twice_changes_nothing(session):
    _, out = session
    assert compact(out) == out


def test_render_is_a_short_text_view(session):
    t, out = session
    text = render(t.events)
    assert "✓ milestone (6 calls): Milestone validated: `npx vue-tsc --noEmit`" in text
    assert "← status: ok (exit 0)" in text and "\x1b" not in text
    assert approx_tokens(text) < approx_tokens(out)
    assert render(out) == text


# --- properties --------------------------------------------------------------------------------

NOISE = ["a", "b", " ", "\n", "\r", "\r\n", "\x1b[31m", "\x1b[0m", "\x1b[2K", "\x1b[1G", "\x1b", "[",
         "⠋", "█████", "42%", "error", "warning", "ok", "\x00", "\x9b", "[... 3 lines omitted ...]", "\t"]
noisy = st.lists(st.sampled_from(NOISE), max_size=60).map("".join)
json_leaf = st.none() | st.booleans() | st.integers(-5, 50) | st.floats(allow_nan=False) | st.text(max_size=8)
json_any = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
ids = st.sampled_from(["t1", "t2", "t3", "t4", "t5"]) | json_any
text_block = st.fixed_dictionaries({"type": st.just("text"), "text": noisy | json_any})
blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": noisy}),
    text_block,
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": ids,
                           "name": st.sampled_from(["Bash", "Edit", "Read"]) | json_any,
                           "input": st.fixed_dictionaries({"command": st.sampled_from(
                               ["npm test", "npm test -- a", "ls", "X=1 npm test", "a && ls\nb"]) | noisy,
                               "file_path": st.sampled_from(["a.ts", "b.ts"])}) | json_any}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": ids,
                           "content": noisy | st.lists(text_block | json_any, max_size=3) | json_any,
                           "is_error": st.booleans() | json_any}),
    json_any,
)
message = st.fixed_dictionaries({"content": st.lists(blocks, max_size=3) | noisy},
                                optional={"id": st.sampled_from(["m1", "m2"]) | json_any,
                                          "role": st.just("assistant"), "usage": json_any}) | json_any
events = st.lists(st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["assistant", "user"]), "message": message},
                          optional={"uuid": st.text(max_size=4),
                                    "parent_tool_use_id": st.none() | st.text(max_size=3)}),
    st.fixed_dictionaries({"type": st.just("stream_event"), "event": json_any}),
    st.fixed_dictionaries({"type": st.just("milestone"), "turns": st.integers(-2, 20) | json_any,
                           "tool_use_ids": st.lists(ids, max_size=3) | json_any}),
    st.fixed_dictionaries({"type": st.sampled_from(["system", "result"]), "subtype": json_any}),
    st.dictionaries(st.text(max_size=6), json_any, max_size=4),
), max_size=30)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_compact_never_raises_and_is_idempotent_on_arbitrary_events(evs):
    once = compact(evs)
    assert compact(once) == once
    render(evs)


@st.composite
def sessions(draw):
    """Sessions of retried commands, so that milestones do form; now and then an id is
    reused, a result is missing, or partials and thinking-only events sit in between."""
    out = []
    for n in range(draw(st.integers(0, 40))):
        tid = f"toolu_{draw(st.integers(0, n)) if draw(st.integers(0, 9)) == 0 else n}"
        out.append(bash(tid, draw(st.sampled_from(["npm test", "npm test -- --run", "npx tsc", "ls"]))))
        extra = draw(st.sampled_from([None, "thinking", "partial"]))
        if extra == "thinking":
            out.append({"type": "assistant", "message": {"content": [{"type": "thinking", "thinking": "x"}]}})
        elif extra == "partial":
            out.append({"type": "stream_event", "event": {"type": "message_stop"}})
        if draw(st.integers(0, 9)):
            out.append(result(tid, draw(noisy), error=draw(st.booleans())))
    return out + [final()] * draw(st.integers(0, 1))


@settings(max_examples=300, deadline=None)
@given(sessions())
def test_compact_is_idempotent_on_sessions_with_milestones(evs):
    once = compact(evs)
    assert compact(once) == once
    collapsed = [i for e in once if e["type"] == "milestone" for i in e["tool_use_ids"]]
    assert set(collapsed) | set(uses(once)) == set(uses(evs))
