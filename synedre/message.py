"""One parsed message: what every stage reads of an email, built once per stage execution."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from synedre.classify.split import Split, split_cover_quoted
from synedre.db import messages
from synedre.db.types import Conn
from synedre.ingest.mime import body_text


@dataclass(frozen=True)
class ParsedMessage:
    id: int
    header_id: str  # the Message-ID header value
    mailbox: str
    sender: str | None  # the envelope From:
    subject: str
    dkim_pass: bool
    raw: bytes
    attachments_dir: str | None
    attachments: tuple[dict[str, Any], ...]  # rows of synedre.attachments, in order

    @classmethod
    def from_claim(cls, state: dict[str, Any], attachments: list[dict[str, Any]]) -> ParsedMessage:
        return cls(state["message_id"], state["message_id_header"], state["mailbox"], state["envelope_from"],
                   state["subject"] or "", bool(state["dkim_pass"]), bytes(state["raw"]),
                   state["attachments_dir"], tuple(attachments))

    @classmethod
    def read(cls, conn: Conn, state: dict[str, Any]) -> ParsedMessage:
        """The message a stage claimed: its state row (joined with the raw one) and its
        attachments' rows, read in the claim's transaction."""
        return cls.from_claim(state, messages.attachments(conn, state["message_id"]))

    @cached_property
    def body(self) -> str:
        """The text body; the MIME tree is walked at most once per stage execution."""
        return body_text(self.raw)

    @cached_property
    def split(self) -> Split:
        return split_cover_quoted(self.body)

    @property
    def attachment_names(self) -> list[str]:
        return [a["filename"] or a["content_type"] for a in self.attachments]

    def files_state(self) -> dict[str, Any]:
        """What `synedre.attachments` needs to find the bytes (directory, else the raw message)."""
        return {"attachments_dir": self.attachments_dir, "raw": self.raw}
