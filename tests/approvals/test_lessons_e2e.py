"""The agent learns from the founder (issue 28, acceptance 1 and 3), through the real fleet:
Dovecot, the scripted classifier, the real `claude` CLI against the scripted Messages API,
the recap by SMTP, the founder's signed NON polled from the inbox, the lesson learnt on the
recap queue, and `synedre lessons` / `inspect` / `lessons retire` as an operator runs them."""
from __future__ import annotations

import json
from email.message import EmailMessage

import pytest

from tests.approvals.test_steering_e2e import (  # noqa: F401  dkim_key and steer are fixtures used here
    cli,
    deliver,
    dkim_key,
    q,
    reply,
    reply_row,
    status,
    steer,
)
from tests.services import stack

pytestmark = [pytest.mark.timeout(400), pytest.mark.integration]

A, B = "garage-martin", "boulangerie-dupont"  # of the corpus's directory
NOTE = "le bouton payer manque sur la page tarifs"


def launch_for(s, client: str, tag: str) -> int:
    """A run + plan message of `client` at `materialized`, handed to spawn."""
    mid = stack.message_at(s["url"], s["tmp"], f"lesson-{tag}", "materialized", client=client, rationale="r")
    from tasks.app import app
    app.send_task("synedre.spawn", args=[mid])
    return mid


def recapped(s, mid: int) -> EmailMessage:
    """The recap of `mid` once the launch and the stages after it are done."""
    stack.wait_for(lambda: status(s["url"], mid) == "actioned", 150, f"message {mid} recapped", interval=0.5)
    rfc = q(s["url"], "SELECT rfc_message_id FROM synedre.outbound_mail WHERE message_id = %s AND kind = 'recap'",
            mid)[0][0]
    return stack.wait_for(lambda: [m.message for m in s["smtp"].messages() if m.message["Message-ID"] == rfc], 30,
                          "the recap mail")[0]


def first_prompt(s, tag: str) -> str:
    """What the scripted API was first sent by the launch of the message tagged `tag`."""
    for r in s["api"].main_requests():
        text = json.dumps(r.body["messages"][0], ensure_ascii=False)
        if r.step == 0 and f"lesson-{tag}." in text:
            return text
    raise AssertionError(f"no launch request for {tag}")


def lessons_of(s, client: str) -> list[dict]:
    out = cli(s, "lessons", "--client", client, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.policy("")
def test_a_founder_s_non_teaches_the_client_s_next_launches_only_until_it_is_retired(steer, services):  # noqa: F811
    s, url = steer, steer["url"]
    # the stages after the launch (the recap) and the lessons' queue
    worker = stack.celery_worker(s["env"], services["logs"], queues="deploy,recap", concurrency=2)
    try:
        one = launch_for(s, A, "a1")
        non = reply(s, recapped(s, one), f"NON : {NOTE}")
        deliver(s, non)
        assert reply_row(s, non)[1] == "noise"
        learnt = stack.wait_for(lambda: lessons_of(s, A), 60, "the lesson of the NON", interval=0.5)
        assert len(learnt) == 1 and NOTE in learnt[0]["body"] and learnt[0]["client"] == A
        assert [(p["kind"], p["message_id"]) for p in learnt[0]["provenance"]] == [("recap_rejected", one)]
        lesson = learnt[0]["id"]
        shown = cli(s, "lessons", "--client", A)
        assert f"recap_rejected of message {one}" in shown.stdout

        # run 2 for A: the note inside the LESSONS fence of its request, and on its launch row
        two = launch_for(s, A, "a2")
        recap_two = recapped(s, two)
        prompt = first_prompt(s, "a2")
        start, end = prompt.index("<<<LESSONS "), prompt.index("<<<END LESSONS ")
        assert NOTE in prompt[start:end] and prompt.count(NOTE) == 1
        assert q(url, "SELECT lesson_ids FROM synedre.launches WHERE message_id = %s", two) == [([lesson],)]
        assert f"lessons given: #{lesson}" in cli(s, "inspect", str(two)).stdout
        body = recap_two.get_body(("plain",)).get_content()
        assert "Leçons données à l'agent" in body and NOTE in body  # the recap says which it was given

        # the same NON again, on run 2's recap: still one lesson, said twice
        again = reply(s, recap_two, f"NON : {NOTE}")
        deliver(s, again)
        reply_row(s, again)
        stack.wait_for(lambda: lessons_of(s, A)[0]["times_said"] == 2, 60, "the NON said again")
        assert [r["id"] for r in lessons_of(s, A)] == [lesson]

        # a run for client B is not given A's lesson
        b = launch_for(s, B, "b1")
        recapped(s, b)
        assert NOTE not in first_prompt(s, "b1") and "<<<LESSONS " not in first_prompt(s, "b1")
        assert q(url, "SELECT lesson_ids FROM synedre.launches WHERE message_id = %s", b) == [([],)]

        # retired: run 3 for A is not given it either
        assert cli(s, "lessons", "retire", str(lesson)).returncode == 0
        three = launch_for(s, A, "a3")
        recapped(s, three)
        assert NOTE not in first_prompt(s, "a3")
        assert q(url, "SELECT lesson_ids FROM synedre.launches WHERE message_id = %s", three) == [([],)]
        assert q(url, "SELECT times_given FROM synedre.lessons WHERE id = %s", lesson) == [(1,)]
    finally:
        worker.stop()
