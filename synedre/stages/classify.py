"""Stage `classify`: facts from the envelope, the prompt, the LLM, the guard rails (SPEC §6)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from synedre import ai, attachments as files, runner
from synedre.approvals import decisions
from synedre.classify import core, resolution
from synedre.classify.prompt import PromptInput
from synedre.classify.rules import Facts
from synedre.config import Settings
from synedre.db import directory as dirsql, messages
from synedre.db.directory import Directory
from synedre.db.types import Conn
from synedre.log import log
from synedre.message import ParsedMessage
from synedre.pipeline import BY_NAME, Status

FEATURE = "atlas_classifier"
STAGE = BY_NAME["classify"]


def run(message_id: int, s: Settings | None = None, *, retry: tuple[int, int, datetime] | None = None
        ) -> runner.Result:
    """The result written. An unreachable LLM hands the message back to wait, `Held` with
    `retry` set for the task to come back: `retry` is (this retry, the last one, when) for
    the waiting reason an operator reads; past the last one it is classify_failed."""
    return runner.run(STAGE, message_id, _load, lambda claim, loaded: _work(claim, *loaded, retry))


def _load(conn: Conn, claim: runner.Claim) -> tuple[ParsedMessage, Directory, decisions.Thread | None]:
    msg = ParsedMessage.read(conn, claim.state)
    return msg, dirsql.load(conn), decisions.thread_of(conn, msg.raw)


def _work(claim: runner.Claim, msg: ParsedMessage, directory: Directory, thread: decisions.Thread | None,
          retry: tuple[int, int, datetime] | None) -> runner.Done | runner.Held | runner.Write:
    judged = _reply(msg, directory, thread) if thread else None
    if judged is not None and (decisions.is_request(thread.kind) or judged.verdict):  # type: ignore[union-attr]
        return _decision(msg, thread, judged)  # type: ignore[arg-type]
    sender = msg.sender
    who = resolution.resolve(sender, msg.split, directory)
    if thread is not None and not decisions.not_the_founders(raw=msg.raw, sender=sender, dkim_pass=msg.dkim_pass,
                                                              founder=_founder(directory)):
        who = resolution.follow(who, directory.by_id(thread.client_id))  # his follow-up: the same client
    envelope_client = resolution.envelope_client(sender, directory)
    facts = Facts(dkim_pass=msg.dkim_pass, subject=msg.subject, from_founder=directory.is_founder(sender),
                  from_atlas=bool(sender) and sender == directory.atlas_address,
                  has_attachments=bool(msg.attachments), envelope_client=envelope_client)
    prompt = PromptInput(sender=sender, subject=msg.subject, cover=msg.split.cover, quoted=msg.split.quoted,
                         ocr_texts=files.cached_texts(msg.attachments, msg.attachments_dir),
                         attachment_names=msg.attachment_names, client=envelope_client, dkim_pass=msg.dkim_pass)
    try:
        # the LLM is called with no transaction open and no connection held
        out = core.classify(facts, prompt, lambda m: ai.complete(FEATURE, m), ai.last_failure)
    except core.LLMUnavailable as exc:
        return _unavailable(msg, exc, retry)
    c = out.classification
    client = directory.clients.get(who.client_codename) if who.client_codename else None
    fields: dict[str, Any] = dict(client_id=client.id if client else None, client_source=who.source,
                                  model=out.model)
    if thread is not None:  # a new request in a recap's thread: its launch continues that work
        fields["follows_message_id"] = thread.message_id
    if c is not None:
        fields.update(intent=c.intent, complexity=c.complexity, confidence=c.confidence,
                      rationale=c.rationale[:2000])
    *before, (event, detail) = out.audits

    def write(conn: Conn) -> runner.Done:
        for name, extra in before:
            messages.audit(conn, msg.id, name, **extra)
        return runner.Done(out.status, event, {**detail, "client": who.client_codename, "client_source": who.source,
                                               "is_forward": who.is_forward}, fields, then=finished)

    def finished() -> None:
        log.info("classified", message=msg.id, status=str(out.status), intent=c and c.intent,
                 llm_calls=out.llm_calls)
        files.remove(msg.attachments_dir)  # classification ended (SPEC §3)
    return write


def _unavailable(msg: ParsedMessage, exc: core.LLMUnavailable,
                 retry: tuple[int, int, datetime] | None) -> runner.Done | runner.Held:
    n, last, when = retry or (0, 0, None)
    if n < last:
        return runner.Held(f"retry {n + 1}/{last}: LLM unavailable ({str(exc)[:200]})", "classify_retry",
                           until=when, retry=True)

    def failed() -> None:
        files.remove(msg.attachments_dir)
        log.error("classify_failed", message=msg.id, reason=str(exc)[:200], retries=n)
    return runner.Done(Status.CLASSIFY_FAILED, detail={"reason": "llm_unavailable", "detail": str(exc)[:500],
                                                       "retries": n}, then=failed)


def _reply(msg: ParsedMessage, directory: Directory, thread: decisions.Thread) -> decisions.Judgement:
    return decisions.judge(thread, raw=msg.raw, sender=msg.sender, dkim_pass=msg.dkim_pass, subject=msg.subject,
                           body=msg.body, cover=msg.split.cover,
                           founder=_founder(directory))


def _founder(directory: Directory) -> frozenset[str]:
    return frozenset(a.lower() for a in directory.founder_emails)


def _decision(msg: ParsedMessage, thread: decisions.Thread, judged: decisions.Judgement) -> runner.Write:
    """A reply to an approval request, or the founder's verdict on a recap: consumed here
    (once), and the reply itself is never launched: it ends as noise with its reason."""
    def write(conn: Conn) -> runner.Done:
        why = judged.why_not
        if why is None and decisions.is_request(thread.kind):
            why = decisions.decide(conn, thread.message_id, approve=judged.verdict == "ok", by=msg.sender or "",
                                   reply_message_id=msg.header_id, note=judged.note, approval_id=thread.approval_id)
        elif why is None and not decisions.record_verdict(conn, thread.message_id, judged.verdict or "",
                                                          judged.note, msg.header_id):
            why = "verdict_already_recorded"
        kind = decisions.REQUEST_KIND if decisions.is_request(thread.kind) else thread.kind
        event = f"{kind}_reply_{'ignored' if why else 'consumed'}"
        detail = {"about": thread.message_id, "verdict": judged.verdict, "reason": why}
        messages.audit(conn, msg.id, event, **detail)
        if why is None and decisions.is_request(thread.kind) and judged.verdict == "ok":
            detail["released"] = thread.message_id  # handed to its gate's stage after the commit
            detail["released_to"] = decisions.released_stage(conn, thread.message_id)
        if why is None and judged.verdict == "non":
            detail["learn"] = thread.message_id  # what he said is learnt after the commit
        rationale = f"reply to {thread.kind} of message {thread.message_id}: {why or judged.verdict}"
        return runner.Done(Status.CLASSIFIED, detail={**detail, "intent": "noise", "model": f"rule:{event}"},
                           fields={"intent": "noise", "complexity": "leger", "confidence": 1.0,
                                   "rationale": rationale, "model": f"rule:{event}"},
                           then=lambda: log.info(event, message=msg.id, about=thread.message_id, reason=why))
    return write
