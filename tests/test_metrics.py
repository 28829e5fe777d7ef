"""`synedre metrics`: the Prometheus endpoint scraped while real workers drain 50 messages."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg.types.json import Jsonb

from synedre import metrics
from synedre.pipeline import STAGES, TERMINAL, Status, queues
from tests.conftest import CORPUS
from tests.services import stack
from tests.services.stack import q

CASES = json.loads((CORPUS / "cases.json").read_text())
# Cases that go through every stage of this release (scan, ocr, classify, materialize) on
# the first LLM answer; copies of them make the drain. Not those that must never reach the
# LLM: a new Message-ID breaks their DKIM signature, so they would.
THROUGH = [c for c in CASES if "intent" in c["expect"] and "status_family" not in c["expect"]
           and isinstance(c["llm"], dict) and c["id"] != "P22"]
DRAINED = 50
FOUR = ("scan", "ocr", "classify", "materialize")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by(sample: dict[tuple, float], label: str) -> dict[str, float]:
    return {dict(k)[label]: v for k, v in sample.items()}


def copies(n: int) -> list[bytes]:
    """`n` corpus messages, each with a Message-ID of its own (else they are one message)."""
    out = []
    for i in range(n):
        case = THROUGH[i % len(THROUGH)]
        raw = (CORPUS / "cases" / case["file"]).read_bytes()
        mid = f"Message-ID: <metrics-{i}-{case['id']}@test.invalid>".encode()
        raw, found = re.subn(rb"(?im)^Message-ID:[^\r\n]*(\r?\n[ \t][^\r\n]*)*", mid, raw, count=1)
        out.append(raw if found else mid + b"\r\n" + raw)
    return out


@pytest.fixture
def endpoint(pipeline):
    port = _free_port()
    proc = stack.Proc("metrics", [sys.executable, "-m", "synedre.cli", "metrics", "--port", str(port)],
                      pipeline["env"], pipeline["logs"])

    def answers():
        if not proc.alive():
            raise RuntimeError(proc.output()[-3000:])
        try:
            return scrape(port)
        except OSError:
            return None
    stack.wait_for(answers, 60, "the metrics endpoint", interval=0.2)
    yield port, proc
    proc.stop()


def settled(url) -> bool:
    done = [str(s) for s in TERMINAL | {Status.MATERIALIZED}]
    (n, pending), = q(url, "SELECT count(*), count(*) FILTER (WHERE NOT status = ANY(%s))"
                           " FROM synedre.email_states", done)
    return n == DRAINED and pending == 0


@pytest.mark.timeout(420)
def test_scraped_during_a_50_message_drain_counts_move_and_stage_histograms_fill(pipeline, endpoint):
    p, (port, proc) = pipeline, endpoint
    before = scrape(port)
    statuses = by(before["synedre_messages"], "status")
    assert set(statuses) == {str(s) for s in Status} and sum(statuses.values()) == 0
    assert set(by(before["synedre_queue_depth"], "queue")) == set(queues())
    assert by(before["synedre_launches"], "status") == {"running": 0, "succeeded": 0, "failed": 0,
                                                        "sandbox_unavailable": 0, "merge_failed": 0}
    assert before["synedre_spend_today_usd"][()] == 0
    assert before["synedre_daily_spend_cap_usd"][()] > 0
    assert before["synedre_spawn_paused"][()] == 0
    assert by(before["synedre_source_up"], "source") == {"postgresql": 1, "redis": 1}
    counts = by(before["synedre_stage_duration_seconds_count"], "stage")
    assert set(counts) == {s.name for s in STAGES if s.entry} and sum(counts.values()) == 0

    with p["dovecot"].client() as c:
        for raw in copies(DRAINED):
            c.append("INBOX", raw)
    from tasks.app import app
    app.send_task("synedre.poll", args=["atlas"])

    scrapes = []
    deadline = time.monotonic() + 300
    while not settled(p["db"]):
        assert time.monotonic() < deadline, "the drain did not settle"
        scrapes.append(scrape(port))
        time.sleep(0.25)
    stack.wait_for(lambda: p["redis"].hlen("unacked") == 0, 60, "tasks acknowledged", interval=0.2)
    after = scrape(port)
    scrapes.append(after)

    # the per-status counts moved: several distinct pictures, messages seen mid-way
    pictures = [tuple(sorted(by(s["synedre_messages"], "status").items())) for s in scrapes]
    assert len(set(pictures)) >= 3, pictures
    in_flight = {str(s) for s in Status} - {str(s) for s in TERMINAL | {Status.MATERIALIZED}}
    assert any(sum(v for k, v in dict(pic).items() if k in in_flight) > 0 for pic in pictures)
    final = by(after["synedre_messages"], "status")
    assert sum(final.values()) == DRAINED
    assert final == {str(s): n for s, n in ((s, sum(1 for (st,) in q(p["db"], "SELECT status FROM"
                                             " synedre.email_states") if st == str(s))) for s in Status)}

    # the histograms filled as the drain went, one observation per stage write, exactly once
    written = dict(q(p["db"], "SELECT detail->>'stage', count(*) FROM synedre.audit_log"
                              " WHERE detail ? 'duration_s' GROUP BY 1"))
    counts = by(after["synedre_stage_duration_seconds_count"], "stage")
    for stage in FOUR:
        assert counts[stage] == written[stage] == DRAINED, (stage, counts, written)
        assert by(after["synedre_stage_duration_seconds_sum"], "stage")[stage] > 0
    mid_way = [by(s["synedre_stage_duration_seconds_count"], "stage")["scan"] for s in scrapes]
    assert any(0 < n < DRAINED for n in mid_way) or len(set(mid_way)) > 2, mid_way
    buckets = {}
    for labels, v in after["synedre_stage_duration_seconds_bucket"].items():
        d = dict(labels)
        buckets.setdefault(d["stage"], []).append((float(d["le"]), v))
    for stage in FOUR:
        series = [v for _, v in sorted(buckets[stage])]
        assert series == sorted(series) and series[-1] == counts[stage]  # cumulative, +Inf = count

    # a queue nobody consumes still shows: materialized messages wait for a spawn worker
    depths = by(after["synedre_queue_depth"], "queue")
    assert depths["spawn"] == p["redis"].llen("spawn") > 0
    assert all(depths[qn] == 0 for qn in FOUR)

    # the kill switch, as `synedre spawn pause` sets it
    subprocess.run([sys.executable, "-m", "synedre.cli", "spawn", "pause", "--reason", "metrics test"],
                   env=p["env"], check=True, timeout=60, cwd=stack.ROOT, capture_output=True)
    assert scrape(port)["synedre_spawn_paused"][()] == 1
    assert proc.alive() and "Traceback" not in proc.output(), proc.output()[-3000:]


# -- the histograms' tail of audit_log, against PostgreSQL ---------------------------------

@pytest.mark.timeout(60)
def test_an_audit_row_committed_after_a_later_one_is_observed_once(db):
    from synedre import db as synedre_db

    durations = metrics.StageDurations()
    with synedre_db.transaction() as conn:
        assert durations.feed(conn) == 0  # begins at the newest row
    slow = psycopg.connect(db)  # a stage write still open while a later one commits
    slow.execute("INSERT INTO synedre.audit_log (event, detail) VALUES ('scanned', %s)",
                 (Jsonb({"stage": "scan", "duration_s": 0.2}),))
    with psycopg.connect(db, autocommit=True) as fast:
        fast.execute("INSERT INTO synedre.audit_log (event, detail) VALUES ('read', %s)",
                     (Jsonb({"stage": "ocr", "duration_s": 3.0}),))
        fast.execute("INSERT INTO synedre.audit_log (event, detail) VALUES ('note', '{}')")
    with synedre_db.transaction() as conn:
        assert durations.feed(conn) == 1
    slow.commit()
    slow.close()
    with synedre_db.transaction() as conn:
        assert durations.feed(conn) == 1
        assert durations.feed(conn) == 0  # nothing twice
    assert (durations.by_stage["scan"].count, durations.by_stage["ocr"].count) == (1, 1)
    fam = durations.family()
    scan = {s.labels.get("le"): s.value for s in fam.samples
            if s.labels["stage"] == "scan" and s.name.endswith("_bucket")}
    assert (scan["0.1"], scan["0.25"], scan["+Inf"]) == (0, 1, 1)


@pytest.mark.timeout(60)
def test_a_scrape_with_redis_down_still_answers_and_says_so(db, monkeypatch):
    from synedre import health

    def down(r):
        raise ConnectionError("redis is down")
    monkeypatch.setattr(health, "queue_depths", down)
    families = {f.name: f for f in metrics.FleetCollector().collect()}
    up = {s.labels["source"]: s.value for s in families["synedre_source_up"].samples}
    assert up == {"postgresql": 1.0, "redis": 0.0}
    assert "synedre_messages" in families and "synedre_queue_depth" not in families
