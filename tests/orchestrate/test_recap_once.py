"""The recap reaches the founder exactly once: ten concurrent recap tasks, and a recap whose
worker died between saving the draft and sending it (real workers, Dovecot, aiosmtpd)."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from synedre import db
from synedre.mail import outbound
from tests.orchestrate.test_close_the_loop import loop, q, status  # noqa: F401  loop is a fixture
from tests.services import stack
from tests.services.claude_api import ScriptedModel, text
from tests.spawn.test_launch_e2e import make_launchable

pytestmark = [pytest.mark.timeout(240), pytest.mark.integration]


def due(url, mid, state="report_due", **extra):
    sets = ", ".join(f"{k} = {v}" for k, v in extra.items())
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"UPDATE synedre.email_states SET status = %s{', ' + sets if sets else ''} WHERE message_id = %s",
                  (state, mid))


def test_ten_concurrent_recap_tasks_send_one_email(loop):  # noqa: F811
    """Ten executions of the recap really at once (ten threads released by one barrier, each
    the stage itself against the real Dovecot and aiosmtpd): one claims, one mail leaves.
    Every execution has returned before the count is read, so a late duplicate cannot slip
    in after it."""
    from synedre.config import get_settings
    from synedre.runner import Done, Skip
    from synedre.stages import recap

    url = loop["url"]
    mid, = make_launchable(url, loop["tmp"], intent="question", complexity="leger", tag="once")
    due(url, mid)
    get_settings.cache_clear()  # the loop's mailbox registry and SMTP peer, in this process too
    gate, results = threading.Barrier(10), []

    def one() -> None:
        gate.wait(timeout=30)
        try:
            results.append(recap.run(mid))
        except recap.RecapDeferred as exc:  # another execution was sending: a retry, not a mail
            results.append(exc)
    threads = [threading.Thread(target=one) for _ in range(10)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in threads) and len(results) == 10
    done = [r for r in results if isinstance(r, Done)]
    assert len(done) == 1 and done[0].status == "actioned", results  # one claimed; the others saw it taken
    assert all(isinstance(r, Done | Skip | recap.RecapDeferred) for r in results), results
    assert status(url, mid) == "actioned"
    assert len(loop["smtp"].messages()) == 1
    assert q(url, "SELECT status, attempts FROM synedre.outbound_mail WHERE message_id = %s", mid)[0][0] == "sent"


def test_a_worker_dead_between_draft_and_send_leaves_one_email_after_the_sweep(loop):  # noqa: F811
    url = loop["url"]
    mid, = make_launchable(url, loop["tmp"], intent="question", complexity="leger", tag="kill")
    # the state a SIGKILL leaves between the two halves: the draft saved in Drafts, the
    # recap's claim held by a worker that no longer renews it
    outbound.save_draft(db.transaction, "atlas", mid, "recap", subject="s", text="draft saved before the kill")
    due(url, mid, "reporting", stage_attempt=1, claimed_at="now() - interval '1 hour'")
    loop["start"](ScriptedModel([[text("unused")]]))
    from tasks.sweep import sweep
    sweep()  # re-offers the recap whose claim expired
    stack.wait_for(lambda: status(url, mid) == "actioned", 60, "the recap after the sweep")
    time.sleep(2)
    mails = loop["smtp"].messages()
    assert len(mails) == 1 and "draft saved before the kill" in mails[0].message.get_body(("plain",)).get_content()
    assert len(q(url, "SELECT 1 FROM synedre.outbound_mail WHERE message_id = %s", mid)) == 1
