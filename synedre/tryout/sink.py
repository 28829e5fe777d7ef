"""The founder's inbox for a try-out: an SMTP server on loopback that takes every mail and
keeps it as a file, `<state dir>/try/sink/NNNN.eml`, in the order it came. `synedre try
inbox` reads them (and so can any mail reader)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

# `<atlas-{kind}-{message id}.{hash}@domain>`: the Message-ID the mail facade gives every
# mail to the founder (synedre/mail/compose.py, rfc_message_id).
ATLAS_ID = re.compile(r"<atlas-(?P<kind>[a-z0-9-]+)-(?P<message>\d+)\.[0-9a-f]{12}@")


class _Keep:
    def __init__(self, folder: Path):
        self.folder = folder

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's hook
        n = len(list(self.folder.glob("*.eml"))) + 1
        tmp = self.folder / f".{n:04d}.tmp"
        tmp.write_bytes(bytes(envelope.content))
        os.replace(tmp, self.folder / f"{n:04d}.eml")  # a reader never sees half a mail
        return "250 2.0.0 kept"


@dataclass
class Sink:
    folder: Path
    controller: Controller

    @property
    def port(self) -> int:
        return int(self.controller.port)

    def stop(self) -> None:
        self.controller.stop()


def start(folder: Path, port: int) -> Sink:
    import logging

    logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd's: a line per connection at INFO
    folder.mkdir(parents=True, exist_ok=True)
    controller = Controller(_Keep(folder), hostname="127.0.0.1", port=port, ready_timeout=10)
    controller.start()
    return Sink(folder, controller)


@dataclass(frozen=True)
class Mail:
    number: int
    path: Path
    message: EmailMessage

    @property
    def kind(self) -> str:
        """recap, alert, approval, … (from its Message-ID), or `mail` for another sender's."""
        found = ATLAS_ID.match(self.message.get("Message-ID", "").strip())
        return found["kind"] if found else "mail"

    @property
    def about(self) -> int | None:
        """The id of the message it is about (what `synedre inspect` takes)."""
        found = ATLAS_ID.match(self.message.get("Message-ID", "").strip())
        return int(found["message"]) if found else None

    def text(self) -> str:
        body = self.message.get_body(("plain",))
        return body.get_content() if body is not None else ""

    def images(self) -> list[tuple[str, bytes]]:
        return [(part.get_filename() or f"image-{i}.png", part.get_content())
                for i, part in enumerate(self.message.walk()) if part.get_content_maintype() == "image"]


def read(folder: Path) -> list[Mail]:
    mails = []
    for path in sorted(folder.glob("[0-9]*.eml")):
        msg = message_from_bytes(path.read_bytes(), policy=policy.default)
        assert isinstance(msg, EmailMessage)
        mails.append(Mail(int(path.stem), path, msg))
    return mails
