"""The classifier's prompt: templates from prompts/, untrusted text fenced per call."""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from functools import lru_cache
from string import Template

from synedre import ROOT
from synedre.classify.resolution import Client

PROMPT_VERSION = "v1"
BODY_MAX_CHARS = 8000
OCR_MAX_CHARS = 4000


@dataclass(frozen=True)
class PromptInput:
    sender: str | None
    subject: str | None
    cover: str
    quoted: str
    ocr_texts: list[str] = field(default_factory=list)
    attachment_names: list[str] = field(default_factory=list)
    client: Client | None = None  # resolved from the envelope, read from the database
    dkim_pass: bool = False


@lru_cache
def template(name: str) -> Template:
    return Template((ROOT / "prompts" / f"{name}.{PROMPT_VERSION}.txt").read_text(encoding="utf-8"))


def new_token(contents: list[str]) -> str:
    """A random marker value that appears nowhere in the untrusted text."""
    while True:
        token = secrets.token_hex(16)
        if not any(token in c for c in contents):
            return token


def fence(name: str, content: str, token: str) -> str:
    return f"<<<{name} {token}>>>\n{content}\n<<<END {name} {token}>>>"


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters truncated ...]"


def client_block(client: Client | None, dkim_pass: bool) -> str:
    if client is None:
        return "CLIENT CONTEXT: none (the sender is not a known client)."
    return ("CLIENT CONTEXT (from our database, not from the email; sender address "
            f"{'authenticated by DKIM' if dkim_pass else 'NOT authenticated'}):\n"
            f"- client: {client.name} ({client.codename})\n- priority: {client.priority}\n"
            f"- monthly recurring revenue: {client.mrr:g} EUR\n- status: {client.status}")


def build(p: PromptInput) -> tuple[list[dict[str, str]], str]:
    """The chat messages and the fence token used (for audits and tests)."""
    cover = truncate(p.cover, BODY_MAX_CHARS)
    quoted = truncate(p.quoted, max(0, BODY_MAX_CHARS - len(cover)))
    ocr = truncate("\n\n".join(p.ocr_texts), OCR_MAX_CHARS)
    names = "\n".join(p.attachment_names)
    untrusted = [p.sender or "", p.subject or "", cover, quoted, ocr, names]
    token = new_token(untrusted)
    user = template("classify.user").substitute(
        client_block=client_block(p.client, p.dkim_pass),
        sender_fenced=fence("SENDER", p.sender or "(unknown)", token),
        subject=fence("SUBJECT", p.subject or "", token),
        cover=fence("COVER", cover, token),
        quoted=fence("QUOTED", quoted, token) if quoted else "QUOTED: none",
        ocr=fence("IMAGE_TEXT", ocr, token) if ocr else "IMAGE_TEXT: none",
        attachments=fence("ATTACHMENT_NAMES", names, token) if names else "ATTACHMENT_NAMES: none",
    )
    system = template("classify.system").substitute(token=token)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], token
