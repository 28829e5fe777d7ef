"""A secret the stream cuts anywhere is stored in no form (issue 14, item 6).

Every planted shape of tests/spawn/test_redact.py::SHAPES is cut at every offset into two
pieces, and at sampled offsets into three: across partial-message deltas (text, thinking,
a tool's `partial_json`), across content blocks (of one assistant event, or of consecutive
assistant events sharing the message id, as Claude Code writes them) and across pty reads
of the raw bytes. Each stream goes through reassembly.py's `Reassembler` with a real `Redactor`,
an NDJSON file in tmp_path and a collecting writer; neither the file nor the payloads
handed to `on_events` (serialized, and as typed events) may hold the secret, JSON-escaped
or not, nor its base64, nor may what a reader rebuilds by joining the stored pieces again
(a block's deltas, a message's blocks). The last test stores such a stream through the
real `EventWriter` and `launches.add_events` in PostgreSQL, then reads every table and
the log.
"""
from __future__ import annotations

import base64
import json
import logging
from typing import Any, BinaryIO

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from synedre import runner
from synedre.redact import Redactor
from synedre.redact.pieces import merge_pieces
from synedre.spawn.event_writer import EventWriter
from synedre.spawn.reassembly import Reassembler
from synedre.spawn.stream import AssistantMessage, ResultMessage, StreamEvent
from tests.spawn.test_redact import SHAPES

SESSION = "5b0c7f3e-2a41-4d0e-9b8e-7c1f20a9d4e6"
MID = "msg_01CutAcrossBlocks0001"
SIGNATURE = "RXVTaWduYXR1cmVPZlRoZVRoaW5raW5nQmxvY2s="
DELTA = {"text": ("text_delta", "text"), "thinking": ("thinking_delta", "thinking"),
         "tool_use": ("input_json_delta", "partial_json")}
THREE = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])


# --- streams, as the CLI writes them (observed on the pinned CLI: one assistant event per
# block, after its deltas and before its content_block_stop; message_stop last) -----------

def meta() -> dict[str, Any]:  # the real CLI adds a uuid and parent_tool_use_id
    return {"session_id": SESSION}


def init() -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "session_id": SESSION, "tools": ["Bash"]}


def result() -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": False, "session_id": SESSION, "result": "fini, é"}


def se(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "stream_event", "event": event, **meta()}


def assistant(blocks: list[dict[str, Any]], mid: str = MID) -> dict[str, Any]:
    return {"type": "assistant", "message": {"id": mid, "role": "assistant", "content": blocks}, **meta()}


def block(kind: str, text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": SIGNATURE} if kind == "thinking" \
        else {"type": "text", "text": text}


def tool_use(text: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_01Split", "name": "Bash", "input": {"command": text}}


def delta(index: int, kind: str, piece: str) -> dict[str, Any]:
    delta_type, key = DELTA[kind]
    return se({"type": "content_block_delta", "index": index, "delta": {"type": delta_type, key: piece}})


def start(index: int, kind: str) -> dict[str, Any]:
    first = {"type": "tool_use", "id": "toolu_01Split", "name": "Bash", "input": {}} if kind == "tool_use" \
        else {"type": kind, kind: ""}
    return se({"type": "content_block_start", "index": index, "content_block": first})


def message(blocks: list[tuple[str, list[str], dict[str, Any]]], *, mid: str = MID,
            stop_reason: str = "end_turn") -> list[dict[str, Any]]:
    """One message: per block (kind, its deltas, the complete block), the real CLI's events."""
    out = [se({"type": "message_start", "message": {"id": mid, "role": "assistant", "content": []}})]
    for i, (kind, pieces, complete) in enumerate(blocks):
        out += [start(i, kind), *(delta(i, kind, p) for p in pieces)]
        if kind == "thinking":
            out.append(se({"type": "content_block_delta", "index": i,
                           "delta": {"type": "signature_delta", "signature": SIGNATURE}}))
        out += [assistant([complete], mid), se({"type": "content_block_stop", "index": i})]
    return out + [se({"type": "message_delta", "delta": {"stop_reason": stop_reason}}),
                  se({"type": "message_stop"})]


def cut(text: str, offsets: tuple[int, ...]) -> list[str]:
    bounds = [0, *offsets, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def in_deltas(kind: str, text: str, offsets: tuple[int, ...]) -> list[dict[str, Any]]:
    """(a) one text or thinking block streamed in deltas cut at `offsets`."""
    return [init(), *message([(kind, cut(text, offsets), block(kind, text))]), result()]


def in_partial_json(text: str, offsets: tuple[int, ...]) -> list[dict[str, Any]]:
    """(b) a Bash command carrying the text, its input JSON streamed in deltas cut at `offsets`."""
    body = json.dumps({"command": text})
    return [init(), *message([("tool_use", cut(body, offsets), tool_use(text))], stop_reason="tool_use"),
            {"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01Split", "content": "ok", "is_error": False}]},
             **meta()},
            result()]


def in_blocks(layout: str, kind: str, text: str, offsets: tuple[int, ...]) -> list[dict[str, Any]]:
    """(c) the text cut into content blocks: `events` one assistant event per block with the
    CLI's partial messages around them, `bare` the same without partials, `one` one event
    holding every block."""
    pieces = cut(text, offsets)
    if layout == "events":
        return [init(), *message([(kind, [p], block(kind, p)) for p in pieces]), result()]
    if layout == "bare":
        return [init(), *(assistant([block(kind, p)]) for p in pieces), result()]
    return [init(), assistant([block(kind, p) for p in pieces]), result()]


def pty_bytes(text: str) -> bytes:
    """(d) what the pty gives: a terminal escape, CRLF lines, a final line without newline
    (with a two-byte character, cut in two by some reads)."""
    lines = [json.dumps(e, ensure_ascii=False).encode() for e in (
        {"type": "assistant", "message": {"id": MID, "content": [block("text", text)]}},
        {"type": "result", "subtype": "success", "is_error": False, "result": "fini, é"})]
    return b"\x1b[?25l" + b"\r\n".join(lines)


# --- the runner's path --------------------------------------------------------------------

class Stored:
    """What one stream left: the NDJSON file's text, the pairs `on_events` got, the sessions."""

    def __init__(self, ndjson: str, pairs: list, sessions: list[str]):
        self.ndjson, self.pairs, self.sessions = ndjson, pairs, sessions

    @property
    def payloads(self) -> list[dict[str, Any]]:
        return [p for _, p in self.pairs]

    def texts(self) -> dict[str, str]:
        return {"ndjson": self.ndjson, "payloads": json.dumps(self.payloads),
                "payloads_utf8": json.dumps(self.payloads, ensure_ascii=False),
                "events": repr([e for e, _ in self.pairs]), **self.read_back()}

    def read_back(self) -> dict[str, str]:
        """What a reader rebuilds from the stored pieces: each block's deltas joined (every
        string of a delta but its type), and each message's text and thinking blocks joined
        (over its events: one message id)."""
        deltas: dict[tuple[int, Any], str] = {}
        blocks: dict[Any, str] = {}
        n = 0
        for p in self.payloads:
            inner = p.get("event") if p.get("type") == "stream_event" else None
            if isinstance(inner, dict) and inner.get("type") == "message_start":
                n += 1
            elif isinstance(inner, dict) and inner.get("type") == "content_block_delta":
                deltas[n, inner.get("index")] = deltas.get((n, inner.get("index")), "") + "".join(
                    v for k, v in inner["delta"].items() if k != "type" and isinstance(v, str))
            elif p.get("type") == "assistant":
                mid = p["message"].get("id")
                blocks[mid] = blocks.get(mid, "") + "".join(
                    b.get("text", "") + b.get("thinking", "") for b in p["message"]["content"])
        return {"deltas_joined": "\n".join(deltas.values()), "blocks_joined": "\n".join(blocks.values())}


class Collect:
    """A collecting writer, in place of `EventWriter` (which only moves the same batches to
    a thread: tests/spawn/test_event_backlog.py) in the exhaustive loops, for their speed."""

    def __init__(self) -> None:
        self.pairs: list = []

    def add(self, batch: list) -> None:
        self.pairs.extend(batch)


def store(reads: list[bytes], ndjson: BinaryIO, redactor: Redactor | None = None, *,
          threaded: bool = False) -> Stored:
    """`reads` through `Reassembler` as launcher.run drives it: each read fed to the LineReader,
    then the reader closed (as `_drain` does). `ndjson`: the NDJSON file, emptied first."""
    ndjson.seek(0)
    ndjson.truncate()
    pairs: list = []
    sessions: list[str] = []
    writer: Any = EventWriter(pairs.extend) if threaded else Collect()
    stream = Reassembler(redactor or Redactor(), ndjson, writer.add, sessions.append)
    for data in reads:
        stream.handle(stream.reader.feed(data))
    stream.handle(stream.reader.close())
    if threaded:
        writer.close()
        assert writer.error is None
    else:
        pairs = writer.pairs
    assert stream.events == len(pairs)
    ndjson.seek(0)
    return Stored(ndjson.read().decode(), pairs, sessions)


def store_events(events: list[dict[str, Any]], ndjson: BinaryIO, redactor: Redactor | None = None,
                 **kw: Any) -> Stored:
    """One pty read per line."""
    return store([json.dumps(e, ensure_ascii=False).encode() + b"\r\n" for e in events], ndjson, redactor, **kw)


@pytest.fixture
def ndjson(tmp_path):
    with (tmp_path / "events.ndjson").open("w+b") as f:
        yield f


def forms(secret: str) -> set[str]:
    """The secret as it could be stored: as is, JSON-escaped, in base64 (standard, URL-safe)."""
    raw = secret.encode()
    return {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
            *(enc(raw).decode().rstrip("=") for enc in (base64.b64encode, base64.urlsafe_b64encode))}


def leaks(secret: str, stored: Stored) -> list[str]:
    return [where for where, text in stored.texts().items() if any(f in text for f in forms(secret))]


def intact(stored: Stored, fed: list[dict[str, Any]]) -> bool:
    """The stream is intact: every event, in order, init's session reported, deltas as lengths."""
    return ([p["type"] for p in stored.payloads] == [e["type"] for e in fed] and stored.sessions == [SESSION]
            and isinstance(stored.pairs[-1][0], ResultMessage)
            and all(set(p["event"]["delta"]) == {"type", "chars"} for p in stored.payloads
                    if p["type"] == "stream_event" and p["event"]["type"] == "content_block_delta"))


def offsets_2(n: int) -> list[tuple[int, ...]]:
    return [(i,) for i in range(n + 1)]


def three_cuts(data: st.DataObject, length: int, secret_at: tuple[int, int]) -> tuple[int, int]:
    """Two offsets, half of the time both within (or at the edges of) the secret."""
    lo, hi = (secret_at if data.draw(st.booleans()) else (0, length))
    i = data.draw(st.integers(max(0, lo - 1), min(length, hi + 1)))
    j = data.draw(st.integers(i, min(length, hi + 1)))
    return i, j


SHAPE = st.sampled_from(SHAPES)


def span(text: str, secret: str) -> tuple[int, int]:
    at = max(text.find(secret), 0)
    return at, at + len(secret)


def cut_in_two_everywhere(length, feed, ndjson):
    """Every SHAPES secret's text, fed cut in two at every offset: (leaks, runs not kept
    intact). `length(text)` is how long the cut piece is, `feed(text, offsets)` the events."""
    found, broken = [], []
    for sid, text, secret, _ in SHAPES:
        for offsets in offsets_2(length(text)):
            fed = feed(text, offsets)
            stored = store_events(fed, ndjson)
            found += [(sid, offsets, where) for where in leaks(secret, stored)]
            broken += [] if intact(stored, fed) else [(sid, offsets)]
    return found, broken


# --- (a) text and thinking deltas -----------------------------------------------------------

@pytest.mark.timeout(120)
def test_a_secret_cut_in_two_deltas_at_any_offset_is_stored_in_no_form(ndjson):
    kind = "text"  # thinking deltas: the three-cut test (the same path, another key)
    found, broken = cut_in_two_everywhere(len, lambda text, offsets: in_deltas(kind, text, offsets), ndjson)
    assert found == []
    assert broken == []


@pytest.mark.timeout(120)
@THREE
@given(shape=SHAPE, kind=st.sampled_from(["text", "thinking"]), data=st.data())
def test_a_secret_cut_in_three_deltas_is_stored_in_no_form(shape, kind, data, ndjson):
    sid, text, secret, _ = shape
    offsets = three_cuts(data, len(text), span(text, secret))
    stored = store_events(in_deltas(kind, text, offsets), ndjson)
    assert leaks(secret, stored) == [], (sid, offsets)


# --- (b) a tool's input JSON in partial_json deltas ----------------------------------------

@pytest.mark.timeout(120)
def test_a_secret_cut_in_two_partial_json_deltas_at_any_offset_is_stored_in_no_form(ndjson):
    found, broken = cut_in_two_everywhere(lambda text: len(json.dumps({"command": text})), in_partial_json, ndjson)
    assert found == []
    assert broken == []


@pytest.mark.timeout(120)
@THREE
@given(shape=SHAPE, data=st.data())
def test_a_secret_cut_in_three_partial_json_deltas_is_stored_in_no_form(shape, data, ndjson):
    sid, text, secret, _ = shape
    body = json.dumps({"command": text})
    offsets = three_cuts(data, len(body), span(body, json.dumps(secret)[1:-1]))
    stored = store_events(in_partial_json(text, offsets), ndjson)
    assert leaks(secret, stored) == [], (sid, offsets)


# --- (c) content blocks ----------------------------------------------------------------------

LAYOUTS = [("events", "text"), ("events", "thinking"), ("bare", "text"), ("one", "text")]
TWO = [layout for layout in LAYOUTS if layout[1] == "text"]  # thinking: the three-cut test


@pytest.mark.timeout(120)
@pytest.mark.parametrize("layout,kind", TWO, ids=[layout for layout, _ in TWO])
def test_a_secret_cut_in_two_content_blocks_at_any_offset_is_stored_in_no_form(layout, kind, ndjson):
    found, broken = cut_in_two_everywhere(len, lambda text, offsets: in_blocks(layout, kind, text, offsets),
                                          ndjson)
    assert found == []
    assert broken == []


@pytest.mark.timeout(120)
@THREE
@given(shape=SHAPE, layout=st.sampled_from(LAYOUTS), data=st.data())
def test_a_secret_cut_in_three_content_blocks_is_stored_in_no_form(shape, layout, data, ndjson):
    sid, text, secret, _ = shape
    offsets = three_cuts(data, len(text), span(text, secret))
    stored = store_events(in_blocks(*layout, text, offsets), ndjson)
    assert leaks(secret, stored) == [], (sid, layout, offsets)


# --- (d) pty reads -----------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_pty_reads_cut_at_any_byte_store_exactly_what_one_read_does(ndjson):
    # LineReader reassembles the lines: whatever the reads, the stored bytes are the same,
    # CRLF, the escape, a UTF-8 character cut in two and the final line without newline included.
    found = []
    for sid, text, secret, _ in SHAPES:
        raw = pty_bytes(text)
        whole = store([raw], ndjson)
        assert len(whole.pairs) == 2 and isinstance(whole.pairs[0][0], AssistantMessage)
        assert leaks(secret, whole) == [], sid
        for i in range(len(raw) + 1):
            stored = store([raw[:i], raw[i:]], ndjson)
            if stored.ndjson != whole.ndjson or stored.payloads != whole.payloads:
                found.append((sid, i))
            found += [(sid, i, where) for where in leaks(secret, stored)]
    assert found == []


WHOLE: dict[str, str] = {}  # shape id -> what one read stores


@pytest.mark.timeout(120)
@THREE
@given(shape=SHAPE, data=st.data())
def test_pty_reads_cut_in_three_store_exactly_what_one_read_does(shape, data, ndjson, tmp_path):
    sid, text, secret, _ = shape
    raw = pty_bytes(text)
    i, j = three_cuts(data, len(raw), span(raw.decode(), secret))  # ASCII up to the secret
    stored = store([raw[:i], raw[i:j], raw[j:]], ndjson)
    if sid not in WHOLE:
        with (tmp_path / "whole.ndjson").open("w+b") as whole_file:
            WHOLE[sid] = store([raw], whole_file).ndjson
    assert stored.ndjson == WHOLE[sid]
    assert leaks(secret, stored) == [], (sid, i, j)


# --- base64 of a configured secret ---------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("channel", ["deltas", "blocks"])
def test_the_base64_of_a_configured_secret_cut_at_any_offset_is_stored_in_no_form(channel, ndjson):
    # Only known values are found in base64: each shape's secret as a configured secret.
    found = []
    for sid, _, secret, _ in SHAPES:
        text = f"echo {base64.b64encode(secret.encode()).decode()} | base64 -d"
        for offsets in offsets_2(len(text)):
            fed = in_deltas("text", text, offsets) if channel == "deltas" else in_blocks("events", "text", text,
                                                                                          offsets)
            stored = store_events(fed, ndjson, Redactor([secret]))
            found += [(sid, offsets, where) for where in leaks(secret, stored)]
    assert found == []


# --- what the design keeps ---------------------------------------------------------------------

def test_a_delta_keeps_its_envelope_and_the_length_of_its_text(ndjson):
    fed = [init(), *message([("thinking", ["Let me ", "look."], block("thinking", "Let me look.")),
                             ("text", ["Hé", "llo"], block("text", "Héllo")),
                             ("tool_use", ['{"command"', ': "ls"}'], tool_use("ls"))]), result()]
    stored = store_events(fed, ndjson, threaded=True)
    deltas = [p for p in stored.payloads if p["type"] == "stream_event"
              and p["event"]["type"] == "content_block_delta"]
    assert [(d["event"]["index"], d["event"]["delta"]) for d in deltas] == [
        (0, {"type": "thinking_delta", "chars": 7}), (0, {"type": "thinking_delta", "chars": 5}),
        (0, {"type": "signature_delta", "chars": len(SIGNATURE)}),
        (1, {"type": "text_delta", "chars": 2}), (1, {"type": "text_delta", "chars": 3}),
        (2, {"type": "input_json_delta", "chars": 10}), (2, {"type": "input_json_delta", "chars": 7})]
    assert all(d["session_id"] == SESSION and d["event"]["type"] == "content_block_delta" for d in deltas)
    assert all(isinstance(e, StreamEvent) and e.subtype == "content_block_delta"
               for e, p in stored.pairs if p in deltas)
    # Everything else is stored as it came (nothing here is a secret).
    kept = [p for p in stored.payloads if p not in deltas]
    assert kept == [e for e in fed if not (e["type"] == "stream_event"
                                           and e["event"]["type"] == "content_block_delta")]
    assert [json.loads(line) for line in stored.ndjson.splitlines()] == stored.payloads


def test_blocks_of_one_message_keep_their_text_when_no_secret_crosses_them(ndjson):
    pieces = ["Le test échoue sur la date ", "du 14/03/2026 : ", "je corrige formatDate."]
    fed = [init(), *message([("text", [p], block("text", p)) for p in pieces]), result()]
    stored = store_events(fed, ndjson)
    assert [p["message"]["content"][0]["text"] for p in stored.payloads if p["type"] == "assistant"] == pieces


def test_a_crossing_secret_is_hidden_in_each_block_and_the_rest_kept(ndjson):
    text = "Config:\n  password: Xq7-vault-Pw9\n  host: db"
    at = text.index("vault")
    stored = store_events(in_blocks("events", "text", text, (at,)), ndjson, threaded=True)
    first, second = (p["message"]["content"][0]["text"] for p in stored.payloads if p["type"] == "assistant")
    assert first == "Config:\n  password: [REDACTED:header_secret]"
    assert second.startswith("[REDACTED:") and second.endswith("]\n  host: db")


def test_events_keep_their_order_and_only_an_open_message_is_held(tmp_path):
    sessions: list[str] = []
    writer = Collect()  # sees what each `handle` hands over, synchronously
    pairs = writer.pairs
    with (tmp_path / "events.ndjson").open("wb") as f:
        stream = Reassembler(Redactor(), f, writer.add, sessions.append)
        msg = message([("text", ["a", "b"], block("text", "ab")), ("text", ["c"], block("text", "c"))])
        stream.handle([init(), msg[0], msg[1]])  # init and the deltas before any assistant event: at once
        assert sessions == [SESSION] and len(pairs) == 3
        first_assistant = next(i for i, e in enumerate(msg) if e["type"] == "assistant")
        stream.handle(msg[2:first_assistant + 1])
        assert len(pairs) == first_assistant + 1  # the deltas went out; the assistant event is held
        stream.handle(msg[first_assistant + 1:-1])
        assert len(pairs) == first_assistant + 1  # the message has not ended
        stream.handle(msg[-1:])  # message_stop
        assert len(pairs) == 1 + len(msg)
        stream.handle([assistant([block("text", "last")], "msg_02"), result()])  # a result ends it too
        assert len(pairs) == 3 + len(msg) and stream.result is not None
        stream.handle([assistant([block("text", "cut off")], "msg_03")])
        assert len(pairs) == 3 + len(msg)
        stream.handle(stream.reader.close())  # the end of the stream releases it
    assert len(pairs) == 4 + len(msg) == stream.events
    fed = [init(), *msg, assistant([block("text", "last")], "msg_02"), result(),
           assistant([block("text", "cut off")], "msg_03")]
    assert [p for _, p in pairs] == [json.loads(line) for line in (tmp_path / "events.ndjson").read_text().splitlines()]
    assert [p["type"] for _, p in pairs] == [e["type"] for e in fed]


def test_merge_pieces_keeps_what_a_piece_alone_hid():
    # A 40-character AWS secret key at the end of a piece, lengthened by the next piece:
    # the whole text no longer shows a bare key, the piece alone did.
    key = "9dZ1m/Qr7+Lk2Vb8Np4Tx6Yc3Hs5Jg0Wf1Ue7Ro2"
    r = Redactor()
    raw = [f"x: {key}", "Zq more"]
    whole = Redactor().redact_text("".join(raw))
    alone = [r.redact_text(p) for p in raw]
    assert key in whole and key not in alone[0]
    out = merge_pieces(whole, alone)
    assert all(key not in p for p in out) and key not in "".join(out)
    assert merge_pieces("same", ["sa", "me"]) == ["sa", "me"]


# --- through PostgreSQL ------------------------------------------------------------------------

@pytest.mark.timeout(180)
def test_cut_secrets_stay_out_of_every_table_the_ndjson_and_the_log(db, tmp_path, capsys, caplog):
    import psycopg

    from synedre import db as database
    from synedre.db import launches
    from tests.spawn.test_launch_claim import classified_message, connect
    from tests.spawn.test_planted_secrets_e2e import dump_schema

    caplog.set_level(logging.DEBUG)
    mid = classified_message(db, tmp_path)
    with connect(db) as conn, conn.transaction():
        claim = runner.claim_launch(conn, mid, model="sonnet")
    assert claim is not None
    # One launch's stream: every shape cut through its secret into deltas, partial_json and
    # blocks (two and three pieces), and the base64 of some configured secrets cut likewise.
    configured = [secret for _, _, secret, _ in SHAPES[::7]]
    events: list[dict[str, Any]] = [init()]
    for n, (_, text, secret, _) in enumerate(SHAPES):
        a, b = span(text, secret)
        for offsets in [((a + b) // 2,), (a + (b - a) // 3, a + 2 * (b - a) // 3)]:
            body = json.dumps({"command": text})
            ja = body.find(json.dumps(secret)[1:-1])
            m = f"msg_01Shape{n:03d}{len(offsets)}"
            events += message([("text", cut(text, offsets), block("text", text))], mid=m + "a")
            events += message([("tool_use", cut(body, tuple(ja + o - a for o in offsets)), tool_use(text))],
                              mid=m + "b", stop_reason="tool_use")
            events.append({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01Split", "content": "ok"}]}, **meta()})
            events += message([("text", [p], block("text", p)) for p in cut(text, offsets)], mid=m + "c")
    for n, secret in enumerate(configured):
        text = f"echo {base64.b64encode(secret.encode()).decode()} | base64 -d"
        events += message([("text", [p], block("text", p)) for p in cut(text, (10, 20))], mid=f"msg_01B64{n}")
    events.append(result())
    raw = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\r\n" for e in events)
    reads = [raw[i:i + 997] for i in range(0, len(raw), 997)]  # pty reads cut lines anywhere

    seq = [0]

    def persist(batch):  # synedre/stages/spawn/launch.py's callback
        with database.transaction() as conn:
            seq[0] = launches.add_events(conn, claim, seq[0], [
                (e.event_type, e.subtype, e.tool_name, payload) for e, payload in batch])

    ndjson_path = tmp_path / "events.ndjson"
    writer = EventWriter(persist)
    with ndjson_path.open("wb") as f:
        stream = Reassembler(Redactor(configured), f, writer.add, None)
        for data in reads:
            stream.handle(stream.reader.feed(data))
        stream.handle(stream.reader.close())
    writer.close()
    assert writer.error is None and seq[0] == len(events) == stream.events

    dump = dump_schema(db)
    on_disk = ndjson_path.read_text()
    captured = capsys.readouterr()
    logs = captured.out + captured.err + caplog.text
    assert "[REDACTED:" in dump and '"chars"' in dump
    with psycopg.connect(db) as conn:
        stored = [p for (p,) in conn.execute("SELECT payload FROM synedre.launch_events WHERE launch_id = %s"
                                             " ORDER BY seq", (claim.launch_id,))]
    assert [p["type"] for p in stored] == [e["type"] for e in events]
    assert stored == [json.loads(line) for line in on_disk.splitlines()]
    read_back = Stored("", [(None, p) for p in stored], []).read_back()  # the pieces joined again
    found = [(sid, where) for sid, _, secret, _ in SHAPES
             for where, content in (("database", dump), ("ndjson", on_disk), ("log", logs), *read_back.items())
             if any(f in content for f in forms(secret))]
    assert found == []
