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
