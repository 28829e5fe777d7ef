"""The pool's check of a connection it hands out (synedre.db.check_idle): no round trip for a
healthy idle one, a failure (so the pool replaces it) for one the server ended."""
import time

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from synedre.db import check_idle


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url)


def test_a_healthy_idle_connection_is_handed_out_without_a_round_trip(db, monkeypatch):
    asked = []
    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(lambda conn: asked.append(conn)))
    with _connect(db) as conn:
        conn.execute("SELECT 1")
        conn.commit()
        for _ in range(3):
            check_idle(conn)
    assert asked == []


def test_a_connection_the_server_ended_fails_its_check(db):
    with _connect(db) as conn, psycopg.connect(db, autocommit=True) as admin:
        pid = conn.info.backend_pid
        conn.commit()
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 5
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(psycopg.OperationalError):
            check_idle(conn)


def test_a_closed_connection_fails_its_check(db):
    conn = _connect(db)
    conn.close()
    with pytest.raises(psycopg.OperationalError):
        check_idle(conn)

