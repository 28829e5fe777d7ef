"""Claim, work, write: no transaction is open and no connection held while a stage waits on
the LLM, so the workers, not the connection pool, bound how many classify at once."""
import json
import threading
import time

import psycopg
import pytest

from synedre.config import Settings, get_settings
from synedre.pipeline import Status
from synedre.stages.poll import ingest_one
from tests.conftest import rebuild_pool
from tests.services.llm_server import start_llm_server

pytestmark = pytest.mark.timeout(120)
DELAY_S, MESSAGES, POOL = 2.0, 20, 2


@pytest.fixture
def small_pool(db, monkeypatch):
    """The process's pool, rebuilt with two connections."""
    close = rebuild_pool(monkeypatch, POOL)
    yield db
    close()


def test_a_pool_of_two_serves_twenty_concurrent_llm_waits(small_pool, tmp_path, monkeypatch):
    url = small_pool
    idle_in_tx, arrived = [], []

    def answer(body, path):
        arrived.append(time.monotonic())
        # while the LLM "thinks" (the request is in, the answer 2 s away): no transaction of
        # ours has been open for long (other threads' short claims and writes may be in flight)
        with psycopg.connect(url, autocommit=True) as c:
            idle_in_tx.append(c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE xact_start < now() - interval '1 second'"
                " AND datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0])
        return json.dumps({"intent": "question", "complexity": "leger", "confidence": 0.9, "rationale": "r"})

    server = start_llm_server(answer, delay_s=DELAY_S)
    try:
        monkeypatch.setenv("SYNEDRE_MISTRAL_API_KEY", "test-key-not-secret")
        monkeypatch.setenv("SYNEDRE_MISTRAL_SERVER_URL", server.url)
        get_settings.cache_clear()
        settings = Settings(state_dir=tmp_path)
        ids = [ingest_one(f"From: a{i}@example.org\r\nMessage-ID: <m{i}@x>\r\nSubject: s{i}\r\n\r\nhello {i}\r\n"
                          .encode(), "atlas", 1, i, settings, lambda _: None) for i in range(MESSAGES)]
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("UPDATE synedre.email_states SET status = 'read'")
        from synedre.stages import classify as stage

        results, errors = {}, []

        def classify(mid):
            try:
                results[mid] = stage.run(mid).status  # a Done: the status it wrote
            except Exception as exc:  # a pool timeout here is the failure this test exists for
                errors.append(repr(exc))
        threads = [threading.Thread(target=classify, args=(mid,)) for mid in ids]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        server.stop()
    assert errors == []
    assert set(results.values()) == {Status.CLASSIFIED}
    # a connection held through the LLM's 2 s would let at most 2 requests in within any 2 s;
    # counted at the server, so a loaded machine's slower start does not blur it
    in_flight = max(sum(t <= u < t + DELAY_S for u in arrived) for t in arrived)
    assert in_flight > POOL, f"at most {in_flight} LLM requests at once: the pool bounded concurrency"
    assert elapsed < MESSAGES / POOL * DELAY_S, f"{elapsed:.1f}s: as long as 2 connections held through each wait"
    assert len(idle_in_tx) == MESSAGES and max(idle_in_tx) == 0
