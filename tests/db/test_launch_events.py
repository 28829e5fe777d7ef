"""launches.add_events: a batch past the stored seqs is COPYed straight into the table, one
that may repeat stored rows goes through `ON CONFLICT DO NOTHING`: each (launch, seq) once."""
from __future__ import annotations

import pytest

from synedre import runner
from synedre.db import launches
from synedre.spawn.stream import Decoded
from tests.spawn.test_launch_claim import classified_message, connect

pytestmark = pytest.mark.timeout(60)


def rows(conn, claim):
    return [(r["seq"], r["event_type"], r["payload"]) for r in conn.execute(
        "SELECT seq, event_type, payload FROM launch_events WHERE launch_id = %s ORDER BY seq", (claim.launch_id,))]


def test_a_batch_sent_again_or_overlapping_the_stored_rows_stores_each_event_once(db, tmp_path):
    mid = classified_message(db, tmp_path)
    with connect(db) as conn:
        with conn.transaction():
            claim = runner.claim_launch(conn, mid)
        batch = [("system", "init", None, {"n": 0}), ("assistant", None, "Bash", {"n": 1}),
                 ("user", None, None, {"n": 2})]
        with conn.transaction():
            assert launches.add_events(conn, claim, 0, batch) == 3
        with conn.transaction():  # the same write tried again (its commit's answer was lost)
            assert launches.add_events(conn, claim, 0, [(t, s, n, {**p, "again": True}) for t, s, n, p in batch]) == 3
        assert rows(conn, claim) == [(i, t, {"n": i}) for i, (t, *_) in enumerate(batch)]
        with conn.transaction():  # overlapping: seqs 2-4, of which 2 is stored
            assert launches.add_events(conn, claim, 2, [("user", None, None, {"n": "2 again"}),
                                                        ("assistant", None, None, {"n": 3}),
                                                        ("result", "success", None, {"n": 4})]) == 5
        with conn.transaction():  # past the stored rows: straight in, twice in one transaction
            assert launches.add_events(conn, claim, 5, [("stream_event", None, None, {"n": 5})]) == 6
            assert launches.add_events(conn, claim, 6, [("stream_event", None, None, {"n": 6})]) == 7
        with conn.transaction():
            assert launches.add_events(conn, claim, 7, []) == 7
        assert [(s, p["n"]) for s, _, p in rows(conn, claim)] == [(i, i) for i in range(7)]


def test_a_payload_that_kept_its_line_is_stored_from_it(db, tmp_path):
    mid = classified_message(db, tmp_path)
    with connect(db) as conn:
        with conn.transaction():
            claim = runner.claim_launch(conn, mid)
        # Python reads 1e400 as inf, which json.dumps writes as `Infinity` (not JSON): the line is stored.
        line = '{"type": "x", "n": 1e400, "t": "café"}'
        with conn.transaction():
            launches.add_events(conn, claim, 0, [("x", None, None, Decoded({"type": "x", "n": float("inf"),
                                                                           "t": "café"}, line)),
                                                 ("y", None, None, {"type": "y", "t": "café"})])
        got = conn.execute("SELECT payload = %s::jsonb AS same FROM launch_events WHERE launch_id = %s"
                           " ORDER BY seq", (line, claim.launch_id)).fetchall()
        assert [r["same"] for r in got] == [True, False]
        assert rows(conn, claim)[1] == (1, "y", {"type": "y", "t": "café"})
