"""Chromium started when QA needs it and closed when idle (issue 30, item 1): a QA worker's
kept browser stays open while a route of any message waits, and is closed, with its driver
and every process of it, once none does; the next check starts one again.

Real components, as tests/orchestrate/test_recap_content.py: the QA stage (`plan`,
`check_one`) in Debian's Chromium against the site fixture; `tasks.qa.idle_browser` is what
the `qa_route` task runs after each check.
"""
from __future__ import annotations

import psutil
import pytest

from synedre.orchestrate import browser
from synedre.pipeline import Status
from synedre.runner import Skip
from tests.orchestrate.test_recap_content import (
    client,
    deployed_run,
    env,  # noqa: F401 - the fixture, shared
    message,
)
from tests.services import stack
from tests.services.site import start_site

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def chromium_pids() -> set[int]:
    """This process's Chromium processes (through the confining wrapper and bwrap)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name() == "chromium" or "chromium" in " ".join(p.cmdline()[:1]):
                out.add(p.pid)
        except psutil.Error:
            pass
    return out


def test_the_kept_chromium_is_closed_once_no_route_waits_and_started_again_for_the_next(env, monkeypatch):  # noqa: F811
    from synedre.stages import qa
    from tasks import qa as qa_tasks

    qa_tasks.browser.load()
    monkeypatch.setattr(browser, "_keep", True)  # as tasks/qa.py's worker_process_init does
    site = start_site(env["tmp"] / "site")
    try:
        assert site.deploy(env["tmp"] / "deploy-state").ok
        client(env["url"], site.url, [site.host])
        mid = message(env, "deployed", ["/contact", "/about"])
        deployed_run(env, mid, site.url)
        assert qa.plan(mid)[1] == 2

        first = qa.check_one(mid)
        assert isinstance(first, Skip) and "1 route(s) left" in first.why, first
        qa_tasks.idle_browser()
        assert browser._kept is not None and browser._kept.browser.alive  # a route waits: kept
        running = chromium_pids()
        assert running, "no Chromium ran the check"

        assert qa.check_one(mid).status == Status.QA_PASSED  # the last route
        qa_tasks.idle_browser()
        assert browser._kept is None
        stack.wait_for(lambda: not chromium_pids(), 10, "the idle worker's Chromium to exit")
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                       for p in running)

        again = message(env, "deployed", ["/contact"])  # the next QA starts one
        deployed_run(env, again, site.url)
        assert qa.plan(again)[1] == 1
        assert browser._kept is None
        assert qa.check_one(again).status == Status.QA_PASSED
        assert browser._kept is not None and chromium_pids()
    finally:
        browser.close_kept_browser()
        site.stop()
