"""Fixtures of the recovery suite: one stack per test (our own redis-server on a free port,
the scripted LLM, the fleet's environment with an embedded PostgreSQL under tmp), over the
Dovecot and clamd fixtures of tests/conftest.py. Everything started is stopped on exit."""
from __future__ import annotations

import pytest

from tests.faults import harness


@pytest.fixture
def fault_stack(tmp_path, dovecot, clamd):
    with harness.open_stack(tmp_path / "stack", dovecot, str(clamd.socket_path)) as st:
        yield st
        # what happened, kept beside the logs for a failure's post-mortem
        (tmp_path / "stack" / "timeline.txt").write_text(
            "".join(f"{at - st.timeline[0][0]:7.1f}s {what}\n" for at, what in st.timeline) if st.timeline else "")
