"""One spending budget per launch across its resumes (issue 28, acceptance 5), end to end: real
Celery spawn workers, the real `claude` CLI under a pty, the scripted Messages API billing each
step (`Bill`: the CLI prices its spend from the usage), PostgreSQL and Redis.

The CLI counts only its own process's spend against `--max-budget-usd`, while its `result`
reports the session's total: a resume given SYNEDRE_MAX_BUDGET_USD again could spend the cap
twice. The figures checked are the CLI's own, as the scripted API receives them in every request
("USD budget: $spent/$budget; $left remaining")."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.services import stack
from tests.services.claude_api import Bill, ScriptedModel, Sleep, bash
from tests.spawn.test_launch_e2e import finished, make_launchable, q, repo  # noqa: F401
from tests.spawn.test_resume import EARLY, FINISH, audits, cli, launch_env  # noqa: F401

pytestmark = [pytest.mark.timeout(150),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed "
                                 "(scripts/install-claude-cli)")]
DOLLAR = Bill(500_000)  # about 1 USD a step on the CLI's default Sonnet
FIGURE = re.compile(r"USD budget: \$[\d.]+/\$([\d.]+); \$[\d.]+ remaining")


def budgets(api) -> list[float]:
    """The budget each CLI process was given, in the order they ran: the CLI tells the model in
    the conversation, each request's last figure being its own run's (a resumed run's request
    replays the earlier runs' figures before it)."""
    seen: list[float] = []
    for figure in map(given, api.main_requests()):
        if figure is not None and (not seen or figure != seen[-1]):
            seen.append(figure)
    return seen


def given(request) -> float | None:
    found = FIGURE.findall(json.dumps(request.body["messages"]))
    return float(found[-1]) if found else None


def cost(url, mid) -> float:
    (usd,), = q(url, "SELECT cost_usd FROM synedre.launches WHERE message_id = %s", mid)
    return float(usd)


def test_an_idle_stopped_launch_that_spent_3_of_5_usd_is_resumed_with_at_most_2(services, launch_env, tmp_path):  # noqa: F811
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    api, env = launch_env(ScriptedModel([DOLLAR, [bash(EARLY)], DOLLAR, [bash("echo two")], DOLLAR,
                                         [bash("echo three")], Sleep(30, once=True), [bash(FINISH)], [bash(FINISH)]]),
                          SYNEDRE_IDLE_TIMEOUT_S="8", SYNEDRE_MAX_BUDGET_USD="5")
    worker = stack.spawn_one(env, services["logs"], mid, lambda: finished(url, 1), 90, "the launch to end")
    assert "stop_reason=idle" in worker.output()
    resumed, = [d for e, d in audits(url, mid) if e == "spawn_resumed"]
    assert 3.0 <= resumed["spent_usd"] < 3.01  # the stopped run's spend, from its session (no result event)
    assert resumed["budget_usd"] == 1.99  # what is left of the 5 USD, down to the cent
    assert budgets(api) == [5.0, 1.99]  # the CLI's own figure: never the whole cap again
    assert q(url, "SELECT status FROM synedre.launches WHERE message_id = %s", mid) == [("succeeded",)]
    assert 3.0 <= cost(url, mid) < 3.05  # the session's total, both runs


def test_a_launch_resumed_twice_never_passes_its_cap_in_total(services, launch_env, tmp_path):  # noqa: F811
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    # two dollars, silence (auto resume), two dollars, silence again (stopped: one resume a claim),
    # then by hand: the last 99 cents go in one step (a step under a dollar: the CLI stops once
    # its run reached its budget); without the fix the third run had 5 USD to spend again.
    api, env = launch_env(ScriptedModel([
        DOLLAR, [bash(EARLY)], DOLLAR, [bash("echo b")], Sleep(30, once=True), [bash("echo c")],
        DOLLAR, [bash("echo d")], DOLLAR, [bash("echo e")], Sleep(30, once=True), [bash("echo f")],
        *[step for _ in range(6) for step in (Bill(495_000), [bash("echo more")])]]),
        SYNEDRE_IDLE_TIMEOUT_S="8", SYNEDRE_MAX_BUDGET_USD="5")
    worker = stack.celery_worker(env, services["logs"], queues="spawn")
    try:
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: finished(url, 1), 90, "the launch to stop twice", interval=0.5)
        (stop, salvage), = q(url, "SELECT stop_reason, salvage FROM synedre.launches")
        assert (stop, salvage["resumable"]) == ("idle", True)
        assert 4.0 <= cost(url, mid) < 4.01  # both runs, from the session the CLI keeps
        out = cli(env, "launch", "resume", str(mid))
        assert out.returncode == 0, out
        stack.wait_for(lambda: q(url, "SELECT 1 FROM synedre.launches WHERE attempt = 2 AND status <> 'running'"),
                       60, "the resumed launch to end", interval=0.5)
    finally:
        worker.stop()
    assert budgets(api) == [5.0, 2.99, 0.99]
    last = [r for r in api.main_requests() if given(r) == 0.99]
    assert len(last) == 1  # its one step reached its budget: the CLI stopped it there
    (stop, payload), = q(url, "SELECT l.stop_reason, e.payload FROM synedre.launches l JOIN synedre.launch_events e"
                              " ON e.launch_id = l.id WHERE e.event_type = 'result'")
    assert payload["subtype"] == "error_max_budget_usd" and stop.startswith("result:error_max_budget_usd")
    assert 4.9 < cost(url, mid) <= 5.0  # three runs, one cap


def test_a_launch_with_nothing_left_of_its_budget_is_not_resumed_and_says_why(services, launch_env, tmp_path):  # noqa: F811
    url = services["db"]
    mid, = make_launchable(url, tmp_path)
    api, env = launch_env(ScriptedModel([Bill(2_497_000), [bash(EARLY)], Sleep(30, once=True), [bash(FINISH)]]),
                          SYNEDRE_IDLE_TIMEOUT_S="8", SYNEDRE_MAX_BUDGET_USD="5")
    stack.spawn_one(env, services["logs"], mid, lambda: finished(url, 1), 60, "the launch to stop")
    (status, stop, salvage), = q(url, "SELECT status, stop_reason, salvage FROM synedre.launches")
    assert (status, stop, salvage["resumable"]) == ("failed", "idle", True)
    assert 4.99 < cost(url, mid) < 5.0  # spent, less than a cent left
    skipped, = [d for e, d in audits(url, mid) if e == "spawn_resume_skipped"]
    assert skipped["by"] == "auto" and "launch spending budget spent" in skipped["reason"], skipped
    assert "spawn_resumed" not in [e for e, _ in audits(url, mid)] and budgets(api) == [5.0]
    out = cli(env, "launch", "resume", str(mid))  # nor by hand: refused in one line, audited
    assert out.returncode == 1 and "spending budget is spent" in out.stderr and "SYNEDRE_MAX_BUDGET_USD" in out.stderr
    refused = [d for e, d in audits(url, mid) if e == "spawn_resume_skipped" and d["by"] == "operator"]
    assert len(refused) == 1 and "spending budget is spent" in refused[0]["reason"]
