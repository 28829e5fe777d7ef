"""The embedded PostgreSQL: restarted by its watchdog after a SIGKILL, stopped on request."""
import os
import signal

import psycopg
import pytest

from synedre import db
from synedre.config import Settings
from tests.services import stack

pytestmark = [pytest.mark.timeout(120), pytest.mark.integration,
              pytest.mark.filterwarnings("ignore::UserWarning")]


def test_a_killed_embedded_server_is_restarted_on_the_same_url_and_stopped_on_request(tmp_path):
    s = Settings(state_dir=tmp_path / "state", database_url=None)
    assert db.ensure_embedded(s) is True  # created and started
    url = db._start_embedded(db.embedded_pgdata(s))
    with psycopg.connect(url) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert pid
    try:
        from pgserver.postgres_server import PostmasterInfo

        postmaster = PostmasterInfo.read_from_pgdata(db.embedded_pgdata(s)).pid
        os.kill(postmaster, signal.SIGKILL)
        stack.wait_for(lambda: not db.embedded_running(s), 10, "the postmaster to be gone")
        assert db.ensure_embedded(s) is True  # the fleet's watchdog
        assert db.ensure_embedded(s) is False  # running: nothing to do
        with psycopg.connect(url) as c:  # the same socket URL: children keep theirs
            assert c.execute("SELECT 1").fetchone() == (1,)
    finally:
        assert db.stop_embedded(s) is True
    assert db.embedded_running(s) is False and db.stop_embedded(s) is False


@pytest.mark.timeout(90)
def test_a_worker_s_pool_serves_again_about_a_second_after_a_long_outage_ends(tmp_path, monkeypatch):
    """Its reconnection attempts no longer back off exponentially: behind 20 s of outage they
    stood at about 1, 3, 7, 15 then 31 s, and the pool served ~10 s after the server was back.
    Its attempts, about a second apart, are said once per 30 s, not each time."""
    import logging
    import threading
    import time

    import psutil

    from synedre.config import get_settings
    from synedre.db import transaction

    monkeypatch.setenv("SYNEDRE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SYNEDRE_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    monkeypatch.setattr(db, "_pool", None)
    monkeypatch.setattr(db, "_embedded_url", None)  # an earlier test's server, cached by this process
    # a failure said by an earlier test of this process less than 30 s ago would hide this one's
    monkeypatch.setattr(db.connect_failures, "last", -db.CONNECT_FAILURE_LOG_EVERY_S)
    # what the pool's logger lets through, seen at the logger itself: whatever an earlier test of
    # this process did to the root logger's handlers or levels
    pool_log, said = logging.getLogger("psycopg.pool"), []
    monkeypatch.setattr(pool_log, "disabled", False)
    monkeypatch.setattr(pool_log, "level", logging.WARNING)
    catch = logging.Handler(logging.WARNING)
    catch.emit = said.append  # type: ignore[method-assign]
    pool_log.addHandler(catch)
    s = get_settings()
    db.ensure_embedded(s)
    assert str(tmp_path) in db.database_url(s)  # the pool's server is the one killed below
    served: list[float] = []

    def ask() -> None:  # a worker's stage, trying again as the runner does
        while True:
            try:
                with transaction() as c:
                    c.execute("SELECT 1")
                served.append(time.monotonic())
                return
            except psycopg.Error:
                time.sleep(0.1)
    try:
        ask()
        from pgserver.postgres_server import PostmasterInfo

        postmaster = psutil.Process(PostmasterInfo.read_from_pgdata(db.embedded_pgdata(s)).pid)
        for p in [postmaster, *postmaster.children(recursive=True)]:  # its backends too: every connection dies
            p.kill()
        stack.wait_for(lambda: not db.embedded_running(s), 10, "the postmaster to be gone")
        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        time.sleep(20)
        assert db.ensure_embedded(s) is True  # the fleet's watchdog
        back = time.monotonic()
        asker.join(40)
        assert len(served) == 2 and served[1] - back < 3.0, [t - back for t in served]
        failures = [r.getMessage() for r in said if r.getMessage().startswith("error connecting")]
        assert len(failures) == 1, failures
    finally:
        pool_log.removeHandler(catch)
        if db._pool is not None:
            db._pool.close()
        db.stop_embedded(s)
        get_settings.cache_clear()
