"""Launches paused: held messages say so, beat's selection never piles up tasks, and a
resume launches each held message once at once (real spawn worker and `claude` CLI)."""
import json
import shutil
import subprocess
import sys

import pytest

from tests.services import stack
from tests.spawn.test_launch_e2e import agent_script, finished, launch_env, make_launchable, q, repo  # noqa: F401

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed")]


def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], env=env, capture_output=True, text=True,
                          timeout=90, cwd=stack.ROOT, check=True).stdout


def test_paused_launches_are_held_once_each_and_resume_launches_each_once(services, launch_env, tmp_path,  # noqa: F811
                                                                            monkeypatch):
    url, r = services["db"], services["redis"]
    api, env = launch_env(agent_script())
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from tests.conftest import _reset_settings
    _reset_settings()
    ids = make_launchable(url, tmp_path, n=3)
    cli(env, "spawn", "pause", "--reason", "maintenance")
    from tasks.app import enqueue
    from tasks.spawn import offer_launches
    from tasks.sweep import sweep

    for mid in ids:  # what materialize does for each
        enqueue("spawn", mid)
    depths = []
    for _ in range(5):  # five minutes of beat: selection every minute, the sweep more often
        offer_launches()
        sweep()
        depths.append(r.llen("spawn"))
    assert depths == [3] * 5

    worker = stack.celery_worker(env, services["logs"], queues="spawn", concurrency=3)
    try:
        # watched in PostgreSQL (a `synedre inspect` per message and per look burnt a core meanwhile),
        # then said by the CLI
        stack.wait_for(lambda: r.llen("spawn") == 0 and q(
            url, "SELECT count(DISTINCT message_id) FROM synedre.audit_log WHERE event = 'spawn_held'") == [(3,)],
            60, "every message held", interval=0.2)
        for m in ids:
            assert "held: launches paused" in (json.loads(cli(env, "inspect", str(m), "--json"))["waiting"] or "")
        shown = cli(env, "inspect", str(ids[0]))
        assert "waiting: held: launches paused" in shown and "maintenance" in shown
        for _ in range(3):
            assert offer_launches() == 0
        assert r.llen("spawn") == 0 and q(url, "SELECT count(*) FROM synedre.launches") == [(0,)]
        assert "3 held message(s) enqueued" in cli(env, "spawn", "resume")
        stack.wait_for(lambda: finished(url, 3), 180, "three launches", interval=0.5)
        offer_launches()  # nothing left to offer: each launched once
    finally:
        worker.stop()
        api.stop()
    assert sorted(q(url, "SELECT message_id, count(*) FROM synedre.launches GROUP BY 1")) == [(m, 1) for m in ids]
    assert {s for (s,) in q(url, "SELECT status FROM synedre.email_states WHERE message_id = ANY(%s)", ids)} \
        == {"spawned"}
    held = q(url, "SELECT count(*) FROM synedre.audit_log WHERE event = 'spawn_held'")[0][0]
    assert held == 3  # one per message, not one per offer
