"""Chromium started when QA needs it and closed when idle (issue 30, item 1): a QA worker's
kept browser serves check after check, and is closed, with its driver and every process of
it, once no check came for a while; the next check starts one again.

Real components, as tests/orchestrate/test_recap_content.py: the QA stage (`plan`,
`check_one`) in Debian's Chromium against the site fixture, in the browser thread a QA
worker's child runs its checks in (synedre/orchestrate/browser_thread.py).
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


def test_the_kept_chromium_serves_check_after_check_and_is_closed_once_qa_is_idle(env, monkeypatch):  # noqa: F811
    from synedre.orchestrate import browser_thread
    from synedre.stages import qa

    monkeypatch.setattr(browser_thread, "IDLE_S", 3.0)
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
        running = chromium_pids()
        assert running, "no Chromium ran the check"
        assert qa.check_one(mid).status == Status.QA_PASSED
        assert running <= chromium_pids(), "the second route did not reuse the kept Chromium"

        stack.wait_for(lambda: not chromium_pids(), 15, "the idle worker's Chromium to exit", interval=0.5)
        assert browser._kept is None

        again = message(env, "deployed", ["/contact"])  # the next QA starts one
        deployed_run(env, again, site.url)
        assert qa.plan(again)[1] == 1
        assert qa.check_one(again).status == Status.QA_PASSED
        assert chromium_pids() and not chromium_pids() & running
    finally:
        browser_thread.stop()
        site.stop()
    assert not chromium_pids()  # the worker's shutdown closes it in its own thread
