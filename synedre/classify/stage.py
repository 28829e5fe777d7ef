"""Stage `classify`: facts from the envelope, the prompt, the LLM, the guard rails (SPEC §6)."""
from __future__ import annotations

from datetime import datetime

from synedre import ai, attachments as files, db
from synedre.classify import core, resolution
from synedre.classify.prompt import PromptInput
from synedre.classify.rules import Facts
from synedre.config import Settings, get_settings
from synedre.db import directory as dirsql, pipeline as sql
from synedre.log import log
from synedre.message import ParsedMessage
from synedre.ocr import stage as ocr
from synedre.pipeline import BY_NAME, Status

FEATURE = "atlas_classifier"
STAGE = BY_NAME["classify"]


def run(message_id: int, s: Settings | None = None, *, retry: tuple[int, int, datetime] | None = None
        ) -> Status | str:
    """The status written, or why nothing was done. An unreachable LLM raises
    core.LLMUnavailable after handing the message back to wait: `retry` is
    (this retry, the last one, when) for the waiting reason an operator reads."""
    s = s or get_settings()
    with db.transaction() as conn:
        claim = sql.claim(conn, STAGE, message_id)
        if claim is None:
            return sql.why_not(conn, STAGE, message_id)
        msg = ParsedMessage.from_claim(claim.state, sql.attachments(conn, message_id))
        directory = dirsql.load(conn)
    with sql.working(claim):
        sender = msg.sender
        who = resolution.resolve(sender, msg.split, directory)
        envelope_client = resolution.envelope_client(sender, directory)
        facts = Facts(dkim_pass=msg.dkim_pass, subject=msg.subject,
                      from_founder=directory.is_founder(sender),
                      from_atlas=bool(sender) and sender == directory.atlas_address,
                      has_attachments=bool(msg.attachments), envelope_client=envelope_client)
        prompt = PromptInput(sender=sender, subject=msg.subject, cover=msg.split.cover,
                             quoted=msg.split.quoted, ocr_texts=ocr.cached_texts(msg),
                             attachment_names=msg.attachment_names, client=envelope_client,
                             dkim_pass=msg.dkim_pass)
        try:
            # the LLM is called with no transaction open and no connection held
            out = core.classify(facts, prompt, lambda m: ai.complete(FEATURE, m), ai.last_failure)
        except core.LLMUnavailable as exc:
            with db.transaction() as conn:
                n, last, when = retry or (0, 0, None)
                if n >= last:
                    sql.write(conn, claim, Status.CLASSIFY_FAILED, "classify_failed",
                              {"reason": "llm_unavailable", "detail": str(exc)[:500], "retries": n})
                    files.remove(msg.attachments_dir)
                    log.error("classify_failed", message=message_id, reason=str(exc)[:200], retries=n)
                    return Status.CLASSIFY_FAILED
                sql.release(conn, claim, reason=f"retry {n + 1}/{last}: LLM unavailable ({str(exc)[:200]})",
                            event="classify_retry", until=when)
            raise
        c = out.classification
        client = directory.clients.get(who.client_codename) if who.client_codename else None
        fields: dict[str, object] = dict(client_id=client.id if client else None, client_source=who.source,
                                         model=out.model)
        if c is not None:
            fields.update(intent=c.intent, complexity=c.complexity, confidence=c.confidence,
                          rationale=c.rationale[:2000])
        *before, (event, detail) = out.audits
        with db.transaction() as conn:
            for name, extra in before:
                sql.audit(conn, message_id, name, **extra)
            sql.write(conn, claim, Status(out.status), event,
                      {**detail, "client": who.client_codename, "client_source": who.source,
                       "is_forward": who.is_forward}, **fields)
    log.info("classified", message=message_id, status=out.status, intent=c and c.intent,
             llm_calls=out.llm_calls)
    files.remove(msg.attachments_dir)  # classification ended (SPEC §3)
    return Status(out.status)
