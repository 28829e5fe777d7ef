"""Stage `classify`: facts from the envelope, the prompt, the LLM, the guard rails (SPEC §6)."""
from __future__ import annotations

from synedre import ai, attachments as files, db
from synedre.classify import core, resolution
from synedre.classify.prompt import PromptInput
from synedre.classify.rules import Facts
from synedre.classify.split import split_cover_quoted
from synedre.config import Settings, get_settings
from synedre.db import pipeline
from synedre.ingest.mime import body_text
from synedre.log import log
from synedre.ocr import stage as ocr

FEATURE = "atlas_classifier"


def run(message_id: int, s: Settings | None = None) -> str | None:
    s = s or get_settings()
    with db.transaction() as conn:
        state = pipeline.lock(conn, message_id, "scanned")
        if state is None:
            return None
        directory = pipeline.load_directory(conn)
        rows = pipeline.attachments(conn, message_id)
        split = split_cover_quoted(body_text(bytes(state["raw"])))
        sender = state["envelope_from"]
        who = resolution.resolve(sender, split, directory)
        envelope_client = resolution.envelope_client(sender, directory)
        facts = Facts(dkim_pass=state["dkim_pass"], subject=state["subject"] or "",
                      from_founder=directory.is_founder(sender),
                      from_atlas=bool(sender) and sender == directory.atlas_address,
                      has_attachments=bool(rows), envelope_client=envelope_client)
        prompt = PromptInput(sender=sender, subject=state["subject"], cover=split.cover,
                             quoted=split.quoted, ocr_texts=ocr.texts(state, rows, s)[0],
                             attachment_names=[r["filename"] or r["content_type"] for r in rows],
                             client=envelope_client, dkim_pass=state["dkim_pass"])
        out = core.classify(facts, prompt, lambda m: ai.complete(FEATURE, m), ai.last_failure)
        c = out.classification
        client = directory.clients.get(who.client_codename) if who.client_codename else None
        fields = dict(client_id=client.id if client else None, client_source=who.source, model=out.model)
        if c is not None:
            fields.update(intent=c.intent, complexity=c.complexity, confidence=c.confidence,
                          rationale=c.rationale[:2000])
        *before, (event, detail) = out.audits
        for name, extra in before:
            pipeline.audit(conn, message_id, name, **extra)
        pipeline.transition(conn, message_id, out.status, event,
                            {**detail, "client": who.client_codename, "client_source": who.source,
                             "is_forward": who.is_forward}, **fields)
    log.info("classified", message=message_id, status=out.status, intent=c and c.intent,
             llm_calls=out.llm_calls)
    files.remove(state["attachments_dir"])  # classification ended (SPEC §3)
    return "materialize" if out.status == "classified" else None


def fail(message_id: int, reason: str) -> None:
    """Give up on a message the LLM never answered for: audited, never a guess."""
    with db.transaction() as conn:
        state = pipeline.lock(conn, message_id, "scanned")
        if state is not None:
            pipeline.transition(conn, message_id, "classify_failed", "classify_failed",
                                {"reason": "llm_unavailable", "detail": reason[:500]})
            files.remove(state["attachments_dir"])
