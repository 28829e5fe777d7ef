"""Stream-json parsing (SPEC §8 Stream): bytes from a pty -> JSON objects -> typed events."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from synedre.spawn.stream import (
    AssistantMessage,
    LineReader,
    OtherBlock,
    ResultMessage,
    StreamEvent,
    StreamParseError,
    SystemEvent,
    SystemInit,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownEvent,
    UserMessage,
    parse_event,
)

SID = "e2ba7ae1-161b-4518-b4fd-0c6e77440c53"
# Trimmed from a real `claude -p --output-format stream-json --verbose
# --include-partial-messages --include-hook-events` run (Claude Code 2.1.332).
INIT = {"type": "system", "subtype": "init", "cwd": "/srv/wt/msg-42", "session_id": SID,
        "tools": ["Task", "Bash", "Edit", "Read", "Write"], "mcp_servers": [],
        "model": "claude-sonnet-5-5", "permissionMode": "bypassPermissions",
        "apiKeySource": "ANTHROPIC_API_KEY", "claude_code_version": "2.1.332",
        "uuid": "fed29a7a-4cea-4111-96d7-08d3b7075ff4"}
HOOK = {"type": "system", "subtype": "hook_response", "hook_id": "92f34e9a",
        "hook_name": "PreToolUse:Bash", "hook_event": "PreToolUse", "output": "pre-hook-ran\n",
        "stdout": "pre-hook-ran\n", "stderr": "", "exit_code": 0, "outcome": "success",
        "uuid": "8c79a620", "session_id": SID}
DELTA = {"type": "stream_event", "event": {"type": "content_block_delta", "index": 1, "delta": {
    "type": "input_json_delta", "partial_json": "{\"command\": \"git status\"}"}},
    "session_id": SID, "parent_tool_use_id": None, "uuid": "7ac36173"}
TOOL_USE = {"type": "assistant", "message": {
    "id": "msg_8b28", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
    "content": [{"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_a6f3", "name": "Bash",
                 "input": {"command": "git status", "description": "Show status"}}],
    "stop_reason": None, "usage": {"input_tokens": 2693, "output_tokens": 1}},
    "parent_tool_use_id": None, "session_id": SID, "uuid": "04ac6c9a"}
TOOL_RESULT = {"type": "user", "message": {"role": "user", "content": [
    {"tool_use_id": "toolu_a6f3", "type": "tool_result",
     "content": "On branch master\n\nnothing to commit", "is_error": False}]},
    "parent_tool_use_id": None, "session_id": SID, "uuid": "4b739018",
    "tool_use_result": {"stdout": "On branch master\n\nnothing to commit", "stderr": ""}}
# The real result line does not start with "type".
RESULT = {"duration_api_ms": 53, "stop_reason": "end_turn", "session_id": SID,
          "total_cost_usd": 0.01153,
          "usage": {"input_tokens": 5495, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0, "output_tokens": 54},
          "permission_denials": [], "terminal_reason": "completed", "is_error": False,
          "num_turns": 2, "subtype": "success", "result": "Done.", "type": "result",
          "duration_ms": 178, "uuid": "c1602828"}
TRANSCRIPT = [INIT, HOOK, DELTA, TOOL_USE, TOOL_RESULT, RESULT]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("raw, kind, labels", [
    (INIT, SystemInit, ("system", "init", None)),
    (HOOK, SystemEvent, ("system", "hook_response", None)),  # a hook event: a system event, its subtype kept
    (TOOL_USE, AssistantMessage, ("assistant", None, "Bash")),  # a tool use names the tool
    (TOOL_RESULT, UserMessage, ("user", None, None)),
    (DELTA, StreamEvent, ("stream_event", "content_block_delta", None)),  # subtype: the inner event's type
    (RESULT, ResultMessage, ("result", "success", None)),
], ids=["init", "hook", "tool_use", "tool_result", "stream_event", "result"])
def test_each_event_has_its_class_type_subtype_and_tool(raw, kind, labels):
    e = parse_event(raw)
    assert isinstance(e, kind)
    assert (e.event_type, e.subtype, e.tool_name) == labels


@pytest.mark.timeout(60)
def test_system_init_gives_what_a_resume_needs():
    e = parse_event(INIT)
    assert (e.session_id, e.model, e.cwd) == (SID, "claude-sonnet-5-5", "/srv/wt/msg-42")
    assert e.tools == ["Task", "Bash", "Edit", "Read", "Write"]
    assert e.raw is INIT


@pytest.mark.timeout(60)
def test_assistant_tool_use_names_the_tool():
    e = parse_event(TOOL_USE)
    assert e.model == "claude-sonnet-5-5"
    assert e.content == [TextBlock("Let me look."), ToolUseBlock(
        "toolu_a6f3", "Bash", {"command": "git status", "description": "Show status"})]


@pytest.mark.timeout(60)
def test_assistant_text_only_has_no_tool_and_unknown_blocks_are_kept():
    raw = {"type": "assistant", "message": {"model": "m", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "redacted_thinking", "data": "xx"}, {"type": "text", "text": "ok"}]}}
    e = parse_event(raw)
    assert e.content[0] == ThinkingBlock("hmm", "sig")
    assert isinstance(e.content[1], OtherBlock) and e.content[1].type == "redacted_thinking"
    assert e.tool_name is None


@pytest.mark.timeout(60)
def test_user_message_carries_tool_results():
    e = parse_event(TOOL_RESULT)
    assert e.tool_results == [ToolResultBlock("toolu_a6f3", "On branch master\n\nnothing to commit",
                                              False)]
    plain = parse_event({"type": "user", "message": {"role": "user", "content": "hello"}})
    assert plain.content == [TextBlock("hello")] and plain.tool_results == []


@pytest.mark.timeout(60)
def test_result_gives_outcome_cost_and_turns():
    e = parse_event(RESULT)
    assert (e.subtype, e.is_error, e.num_turns, e.duration_ms) == ("success", False, 2, 178)
    assert e.total_cost_usd == 0.01153 and e.usage["output_tokens"] == 54
    assert e.session_id == SID and e.permission_denials == [] and e.result == "Done."


@pytest.mark.timeout(60)
def test_result_with_denials_and_missing_optional_fields():
    e = parse_event({"type": "result", "subtype": "error_max_turns", "is_error": True,
                     "permission_denials": [{"tool_name": "Bash", "tool_use_id": "t1"}]})
    assert e.is_error and e.permission_denials[0]["tool_name"] == "Bash"
    assert e.num_turns is None and e.total_cost_usd is None and e.usage is None


@pytest.mark.timeout(60)
def test_unknown_kinds_are_kept_not_dropped():
    raw = {"type": "rate_limit_event", "subtype": "warning", "rate_limit_info": {}}
    e = parse_event(raw)
    assert isinstance(e, UnknownEvent) and e.type == "rate_limit_event" and e.raw is raw
    assert (e.event_type, e.subtype, e.tool_name) == ("rate_limit_event", "warning", None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("raw", [
    {"type": "result", "is_error": False, "num_turns": 1},             # no subtype
    {"type": "result", "subtype": "success"},                          # no is_error
    {"type": "assistant", "session_id": SID},                          # no message
    {"type": "assistant", "message": {"content": 42}},
    {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t"}]}},  # no name
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x"}]}},
    {"type": "system", "subtype": "init", "model": "m"},               # no session_id
    {"type": "system"},
    {"session_id": SID},                                               # no type
    ["not", "an", "object"],
])
def test_missing_required_field_raises_with_the_raw_data(raw):
    with pytest.raises(StreamParseError) as err:
        parse_event(raw)
    assert err.value.raw is raw


def lines(objs, sep=b"\r\n"):
    return b"".join(json.dumps(o, ensure_ascii=False).encode() + sep for o in objs)


@pytest.mark.timeout(60)
def test_pty_output_with_crlf_and_noise_gives_the_objects_in_order():
    r = LineReader()
    data = b"\x1b[?25l" + lines(TRANSCRIPT[:3]) + b"Warning: something on stderr\r\n\r\n" \
        + b'{"type": "assistant", "message": \r\n' + lines(TRANSCRIPT[3:]) + b"\x1b[?25h"
    assert r.feed(data) + r.close() == TRANSCRIPT
    assert r.skipped == 2  # the stderr line and the broken one; blank lines are not counted


@pytest.mark.timeout(60)
def test_terminal_escapes_glued_to_a_json_line_do_not_lose_it():
    r = LineReader()
    data = b"\x1b[?25l" + lines([INIT]) + json.dumps(RESULT).encode() + b"\x1b[?25h\x1b[0m"
    assert r.feed(data) + r.close() == [INIT, RESULT]
    assert r.skipped == 0


@pytest.mark.timeout(60)
def test_final_line_without_newline_is_flushed_on_close():
    r = LineReader()
    assert r.feed(lines([INIT]) + json.dumps(RESULT).encode()) == [INIT]
    assert r.close() == [RESULT]
    assert r.close() == []


@pytest.mark.timeout(60)
def test_multibyte_character_split_across_reads_is_intact():
    line = lines([{"type": "assistant", "text": "café 😀 ok"}])
    cut = line.index("😀".encode()) + 2
    r = LineReader()
    assert r.feed(line[:cut]) == []
    assert r.feed(line[cut:]) == [{"type": "assistant", "text": "café 😀 ok"}]


@pytest.mark.timeout(60)
def test_invalid_utf8_is_replaced_not_fatal():
    r = LineReader()
    assert r.feed(b'{"type": "x", "t": "a\xffb"}\n') == [{"type": "x", "t": "a\ufffdb"}]


@pytest.mark.timeout(60)
def test_nan_and_broken_json_are_skipped_and_counted():
    r = LineReader()
    out = r.feed(b'{"type": "x", "v": NaN}\n{"type": "x",\n{"type": "ok"}\n' + b"[" * 100_000 + b"\n")
    assert out == [{"type": "ok"}] and r.skipped == 3


@pytest.mark.timeout(60)
def test_a_5_mb_line_survives_small_reads():
    big = {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "é0123456789" * 450_000}]}}
    data = lines([INIT, big, RESULT])
    assert len(data) > 5_000_000
    r = LineReader()
    out = []
    for i in range(0, len(data), 4096):  # a pty hands over at most a few KiB per read
        out += r.feed(data[i:i + 4096])
    assert out + r.close() == [INIT, big, RESULT]


@pytest.mark.timeout(60)
def test_a_line_over_the_cap_is_dropped_and_counted():
    r = LineReader(max_line=1000)
    data = lines([INIT, {"type": "x", "blob": "a" * 5000}, RESULT, {"type": "y", "blob": "b" * 999}])
    out = []
    for i in range(0, len(data), 100):
        out += r.feed(data[i:i + 100])
    assert out + r.close() == [INIT, RESULT]
    assert r.oversized == 2 and r.skipped == 0


@pytest.mark.timeout(60)
def test_reader_then_parser_on_a_whole_transcript():
    r = LineReader()
    events = [parse_event(o) for o in r.feed(lines(TRANSCRIPT)) + r.close()]
    assert [(e.event_type, e.subtype, e.tool_name) for e in events] == [
        ("system", "init", None), ("system", "hook_response", None),
        ("stream_event", "content_block_delta", None), ("assistant", None, "Bash"),
        ("user", None, None), ("result", "success", None)]


# --- property: whatever the chunking and the noise, the objects come out in order ------

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text() \
    | st.floats(allow_nan=False, allow_infinity=False)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(), inner, max_size=4), max_leaves=12)
OBJECTS = st.dictionaries(st.text(), JSON_VALUES, max_size=5)


def _noise(b: bytes) -> bytes:
    return b.replace(b"\n", b"").replace(b"\x1b", b"")  # fixed escapes are sampled below


def _noise_ok(b: bytes) -> bool:
    return not b.replace(b"\r", b"").strip().startswith(b"{")


NOISE = st.one_of(
    st.binary(max_size=40).map(_noise).filter(_noise_ok),
    st.text(max_size=40).map(lambda t: _noise(t.encode())).filter(_noise_ok),
    st.text(max_size=40).map(lambda t: ("{" + t.replace("\n", "") + ",").encode()),  # broken JSON
    st.sampled_from([b"\x1b[?25l", b"\x1b[?25h", b"Error: spawn ENOENT", b"   "]),
)


@pytest.mark.timeout(60)
@settings(deadline=None, max_examples=150)
@given(items=st.lists(st.one_of(OBJECTS.map(lambda o: ("obj", o)), NOISE.map(lambda n: ("noise", n))),
                      max_size=12),
       final_newline=st.booleans(), data=st.data())
def test_any_chunking_returns_exactly_the_objects_in_order(items, final_newline, data):
    stream = b"".join(json.dumps(v, ensure_ascii=False).encode() + b"\r\n" if k == "obj"
                      else v + b"\r\n" for k, v in items)
    if not final_newline:
        stream = stream.removesuffix(b"\r\n")  # the process died mid-line: close() flushes it
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    r = LineReader()
    out = []
    for a, b in zip([0] + cuts, cuts + [len(stream)], strict=True):
        out += r.feed(stream[a:b])
    assert out + r.close() == [v for k, v in items if k == "obj"]
