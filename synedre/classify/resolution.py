"""Who is this email about? `ClientResolution` from the envelope, else a forwarded From:."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from synedre.classify.split import Split, forwarded_sender
from synedre.db.directory import Client, Directory

Source = Literal["envelope", "forwarded-body", "follows", "unknown"]


@dataclass(frozen=True)
class ClientResolution:
    client_codename: str | None
    source: Source
    is_forward: bool


def resolve(envelope_from: str | None, split: Split, directory: Directory) -> ClientResolution:
    """SPEC §8. A forward that resolves to nothing stays `unknown`: no silent fallback."""
    if not directory.is_founder(envelope_from):
        client = directory.match(envelope_from)
        if client:
            return ClientResolution(client.codename, "envelope", split.is_forward)
    if directory.is_founder(envelope_from) or split.is_forward:
        client = directory.match(forwarded_sender(split.quoted) if split.quoted else None)
        if client:
            return ClientResolution(client.codename, "forwarded-body", split.is_forward)
    return ClientResolution(None, "unknown", split.is_forward)


def envelope_client(envelope_from: str | None, directory: Directory) -> Client | None:
    """The client the *envelope* sender belongs to: the only basis for raising privileges."""
    return None if directory.is_founder(envelope_from) else directory.match(envelope_from)


def follow(who: ClientResolution, followed: Client | None) -> ClientResolution:
    """A new request the founder sent in a recap's thread continues that work: with no client
    of its own, it has the client of the message it follows (source `follows`), and so its
    tenant and repository. Only for the founder's signed mail: the caller checks."""
    if who.client_codename is not None or followed is None:
        return who
    return ClientResolution(followed.codename, "follows", who.is_forward)
