"""Stage `classify`: facts from the envelope, the prompt, the LLM, the guard rails (SPEC §6)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from synedre import ai, attachments as files, runner
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


def _load(conn: Conn, claim: runner.Claim) -> tuple[ParsedMessage, Directory]:
    return ParsedMessage.read(conn, claim.state), dirsql.load(conn)


def _work(claim: runner.Claim, msg: ParsedMessage, directory: Directory,
          retry: tuple[int, int, datetime] | None) -> runner.Done | runner.Held | runner.Write:
    sender = msg.sender
    who = resolution.resolve(sender, msg.split, directory)
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
