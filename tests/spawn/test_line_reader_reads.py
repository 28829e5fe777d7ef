"""LineReader reads a line whole in one read without buffering it (synedre/spawn/stream.py):
however the reads cut the stream, it gives what the buffered path gives a byte at a time."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from synedre.spawn.stream import LineReader

MAX_LINE = 60
pieces = st.sampled_from([b"\r", b"\x1b[?25l", b" ", b"noise", b"{", b"}", b"\xc3\xa9", b"[1]"])
objects = st.dictionaries(st.sampled_from(["type", "text", "n"]), st.text(max_size=40) | st.integers(), max_size=3)
lines = st.lists(objects.map(lambda o: json.dumps(o, ensure_ascii=False).encode())
                 | st.lists(pieces, max_size=6).map(b"".join), max_size=8)


def read(reader: LineReader, data: bytes, sizes: list[int]) -> list[dict]:
    out, i, k = [], 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        out += reader.feed(data[i:i + n])
        i, k = i + n, k + 1
    return out + reader.close()


@pytest.mark.timeout(60)
@settings(deadline=None, max_examples=150)
@given(lines=lines, sizes=st.lists(st.integers(1, 400), min_size=1, max_size=5), end=st.booleans())
def test_whole_lines_in_one_read_decode_as_the_buffered_path_does(lines, sizes, end):
    data = b"\n".join(lines) + (b"\n" if end else b"")
    whole, buffered = LineReader(max_line=MAX_LINE), LineReader(max_line=MAX_LINE)
    got, want = read(whole, data, sizes), read(buffered, data, [1])
    assert got == want and [o.json_text for o in got] == [o.json_text for o in want]
    assert (whole.skipped, whole.oversized) == (buffered.skipped, buffered.oversized)
