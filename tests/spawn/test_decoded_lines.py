"""A stream object keeps its line's JSON text (`stream.Decoded`) only while it holds what that
text says: what redaction left as it was is stored from its line, a delta without its text
from that text encoded once, anything redaction changed is encoded again
(synedre/spawn/reassembly.py), so no stored form is ever the text from before redaction."""
from __future__ import annotations

import io
import json

from synedre.redact import Redactor
from synedre.spawn.reassembly import Reassembler
from synedre.spawn.stream import Decoded, LineReader
from tests.spawn.test_split_secrets import in_blocks, init, result

SECRET = "Xq7-vault-Pw9-9fK2mZ"


def test_a_decoded_object_keeps_its_line_without_the_pty_s_noise():
    r = LineReader()
    out = r.feed(b'\x1b[?25l{"type": "x",  "a": [1, 2], "t": "caf\xc3\xa9"}\r\n{"type": "y"}')
    out += r.close()
    assert out == [{"type": "x", "a": [1, 2], "t": "café"}, {"type": "y"}]
    assert all(type(o) is Decoded for o in out)
    assert [o.json_text for o in out] == ['{"type": "x",  "a": [1, 2], "t": "café"}', '{"type": "y"}']


def test_only_what_redaction_left_unchanged_keeps_its_line():
    text = "Config:\n  password: Xq7-vault-Pw9\n  host: db"
    tool = {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": f"DB_PASSWORD={SECRET}\nok"}]}}
    clean = {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t2", "content": "nothing to hide here"}]}}
    fed = [init(), clean, tool, *in_blocks("events", "text", text, (text.index("vault"),)), clean, result()]
    lines = [json.dumps(e, separators=(", ", ":")) for e in fed]  # not json.dumps' own spacing
    pairs: list = []
    ndjson = io.BytesIO()
    stream = Reassembler(Redactor([SECRET]), ndjson, pairs.extend, None)
    stream.handle(stream.reader.feed("\r\n".join(lines).encode() + b"\r\n"))
    stream.handle(stream.reader.close())
    payloads = [p for _, p in pairs]
    assert len(payloads) == len(fed)
    shortened = 0
    for line, fed_one, p in zip(lines, fed, payloads, strict=True):
        kept = getattr(p, "json_text", None)
        if p == fed_one:  # nothing hidden, nothing shortened: stored as the line came
            assert kept == line
        elif fed_one.get("type") == "stream_event" and fed_one["event"]["type"] == "content_block_delta":
            # A delta without its text is encoded once, as it is stored and written.
            assert type(p) is Decoded and json.loads(kept) == p and set(p["event"]["delta"]) == {"type", "chars"}
            shortened += 1
        else:  # redacted, or a block the joined message's redaction changed
            assert kept is None and type(p) is dict
    assert shortened >= 2
    stored = ndjson.getvalue().decode()
    assert [json.loads(line) for line in stored.splitlines()] == payloads
    assert SECRET not in stored and "vault" not in stored.replace("[REDACTED:header_secret]", "")
    assert sum(getattr(p, "json_text", None) is not None for p in payloads) >= 3  # init, the clean ones, result
    assert any(p["type"] == "assistant" and type(p) is dict for p in payloads)  # the crossing secret's blocks
