"""Stage `classify`: facts from the envelope, the prompt, the LLM, the guard rails (SPEC §6)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from synedre import ai, attachments as files, runner
from synedre.approvals import decisions, replies
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


Retry = tuple[int, int, datetime]  # (this retry, the last one, when the next one runs)


@dataclass(frozen=True)
class _Loaded:
    msg: ParsedMessage
    directory: Directory
    thread: decisions.Thread | None


@dataclass(frozen=True)
class _Classified:
    msg: ParsedMessage
    out: core.ClassifyOutcome
    who: resolution.ClientResolution
    fields: dict[str, Any]


@dataclass(frozen=True)
class _Unavailable:
    msg: ParsedMessage
    error: str


_Worked = replies.Reply | _Classified | _Unavailable


class Classify(runner.StageCode[_Loaded, "_Worked"]):
    """An unreachable LLM hands the message back to wait, `Held` with `retry` set for the task
    to come back: `retry` is (this retry, the last one, when) for the waiting reason an
    operator reads; past the last one it is classify_failed."""
    stage = STAGE

    def __init__(self, retry: Retry | None = None) -> None:
        self.retry = retry

    def load(self, conn: Conn, claim: runner.Claim) -> _Loaded:
        msg = ParsedMessage.from_claim(claim.state, messages.attachments_of(conn, claim.state))
        return _Loaded(msg, dirsql.load(conn), decisions.thread_of(conn, msg.raw))

    def work(self, claim: runner.Claim, x: _Loaded) -> _Worked:
        msg, directory, thread = x.msg, x.directory, x.thread
        if reply := replies.judge(msg, directory, thread):  # the founder's decision: never classified
            return reply
        sender = msg.sender
        who = resolution.resolve(sender, msg.split, directory)
        if thread is not None and not decisions.not_the_founders(raw=msg.raw, sender=sender, dkim_pass=msg.dkim_pass,
                                                                  founder=replies.founder(directory)):
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
            return _Unavailable(msg, str(exc))
        c = out.classification
        client = directory.clients.get(who.client_codename) if who.client_codename else None
        fields: dict[str, Any] = dict(client_id=client.id if client else None, client_source=who.source,
                                      model=out.model)
        if thread is not None:  # a new request in a recap's thread: its launch continues that work
            fields["follows_message_id"] = thread.message_id
        if c is not None:
            fields.update(intent=c.intent, complexity=c.complexity, confidence=c.confidence,
                          rationale=c.rationale[:2000])
        return _Classified(msg, out, who, fields)

    def write(self, conn: Conn, claim: runner.Claim, worked: _Worked) -> runner.Done | runner.Held:
        if isinstance(worked, replies.Reply):
            return replies.consume(conn, worked)
        if isinstance(worked, _Unavailable):
            n, last, when = self.retry or (0, 0, None)
            if n < last:
                return runner.Held(f"retry {n + 1}/{last}: LLM unavailable ({worked.error[:200]})", "classify_retry",
                                   until=when, retry=True)
            return runner.Done(Status.CLASSIFY_FAILED, detail={"reason": "llm_unavailable",
                                                               "detail": worked.error[:500], "retries": n})
        *before, (event, detail) = worked.out.audits
        for name, extra in before:
            messages.audit(conn, claim.message_id, name, **extra)
        who = worked.who
        return runner.Done(worked.out.status, event, {**detail, "client": who.client_codename,
                                                      "client_source": who.source, "is_forward": who.is_forward,
                                                      "llm_calls": worked.out.llm_calls},
                           worked.fields)

    def after(self, claim: runner.Claim, worked: object, result: runner.Done | runner.Held) -> None:
        if not isinstance(result, runner.Done):
            return
        if str(result.detail.get("model", "")).startswith("rule:") and "about" in result.detail:  # a reply
            log.info(str(result.detail["model"]).removeprefix("rule:"), message=claim.message_id,
                     about=result.detail["about"], reason=result.detail["reason"])
            return
        if result.status == Status.CLASSIFY_FAILED:
            log.error("classify_failed", message=claim.message_id, reason=result.detail.get("detail", "")[:200],
                      retries=result.detail.get("retries"))
        else:
            log.info("classified", message=claim.message_id, status=str(result.status),
                     intent=result.fields.get("intent"), llm_calls=result.detail.get("llm_calls"))
        files.remove(claim.state["attachments_dir"])  # classification ended (SPEC §3)


def run(message_id: int, s: Settings | None = None, *, retry: Retry | None = None) -> runner.Result:
    """The result written (see `Classify`)."""
    return runner.run(Classify(retry), message_id)
