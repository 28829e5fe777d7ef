"""The founder's replies to our mails, judged before any LLM sees them (SPEC §9.6).

The classify stage asks `judge` first: a reply to an approval request, or his verdict on a
recap, is consumed here once (`consume`, in the classify stage's write transaction) and is
never launched itself: it ends `classified` as noise, with its reason. A new request written
in a recap's thread is not a decision: it goes on to the classifier, for its client.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synedre.approvals import decisions
from synedre.db import messages
from synedre.db.directory import Directory
from synedre.db.types import Conn
from synedre.message import ParsedMessage
from synedre.pipeline import Status
from synedre.runner import Done


@dataclass(frozen=True)
class Reply:
    """A reply that decides something: the reply, the mail it answers, and what it says."""
    msg: ParsedMessage
    thread: decisions.Thread
    judged: decisions.Judgement


def founder(directory: Directory) -> frozenset[str]:
    return frozenset(a.lower() for a in directory.founder_emails)


def judge(msg: ParsedMessage, directory: Directory, thread: decisions.Thread | None) -> Reply | None:
    """The reply to consume instead of classifying, if this message is one: any answer to an
    approval request (even one refused, with why), or a verdict (OK/NON) on a recap."""
    if thread is None:
        return None
    judged = decisions.judge(thread, raw=msg.raw, sender=msg.sender, dkim_pass=msg.dkim_pass, subject=msg.subject,
                             body=msg.body, cover=msg.split.cover, founder=founder(directory))
    return Reply(msg, thread, judged) if decisions.is_request(thread.kind) or judged.verdict else None


def consume(conn: Conn, reply: Reply) -> Done:
    """Consume the decision once, in the caller's transaction; the reply's own result: noise,
    with `released` (the message an OK handed back to its gate's stage, and that stage) and
    `learn` (a NON whose reasons become a lesson) for the task to act on after the commit."""
    msg, thread, judged = reply.msg, reply.thread, reply.judged
    why = judged.why_not
    if why is None and decisions.is_request(thread.kind):
        why = decisions.decide(conn, thread.message_id, approve=judged.verdict == "ok", by=msg.sender or "",
                               reply_message_id=msg.header_id, note=judged.note, approval_id=thread.approval_id)
    elif why is None and not decisions.record_verdict(conn, thread.message_id, judged.verdict or "",
                                                      judged.note, msg.header_id):
        why = "verdict_already_recorded"
    kind = decisions.REQUEST_KIND if decisions.is_request(thread.kind) else thread.kind
    event = f"{kind}_reply_{'ignored' if why else 'consumed'}"
    detail: dict[str, Any] = {"about": thread.message_id, "verdict": judged.verdict, "reason": why}
    messages.audit(conn, msg.id, event, **detail)
    if why is None and decisions.is_request(thread.kind) and judged.verdict == "ok":
        detail["released"] = thread.message_id
        detail["released_to"] = decisions.released_stage(conn, thread.message_id)
    if why is None and judged.verdict == "non":
        detail["learn"] = thread.message_id
    rationale = f"reply to {thread.kind} of message {thread.message_id}: {why or judged.verdict}"
    return Done(Status.CLASSIFIED, detail={**detail, "intent": "noise", "model": f"rule:{event}"},
                fields={"intent": "noise", "complexity": "leger", "confidence": 1.0, "rationale": rationale,
                        "model": f"rule:{event}"})
