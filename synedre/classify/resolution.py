"""Who is this email about? `ClientResolution` from the envelope, else a forwarded From:."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from synedre.classify.split import Split, forwarded_sender

# Anyone can open an address there: a domain match on them proves nothing.
CONSUMER_DOMAINS = frozenset("""
gmail.com googlemail.com hotmail.com hotmail.fr outlook.com outlook.fr live.com live.fr msn.com
yahoo.com yahoo.fr icloud.com me.com mac.com aol.com gmx.com gmx.fr protonmail.com proton.me
free.fr orange.fr wanadoo.fr sfr.fr neuf.fr laposte.net bbox.fr numericable.fr club-internet.fr
""".split())

Source = Literal["envelope", "forwarded-body", "unknown"]


@dataclass(frozen=True)
class Client:
    id: int
    codename: str
    name: str
    priority: str
    mrr: float
    status: str
    domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Directory:
    founder_emails: frozenset[str]
    founder_domain: str
    atlas_address: str
    clients: dict[str, Client] = field(default_factory=dict)       # codename -> client
    persons: dict[str, str] = field(default_factory=dict)          # email -> codename

    def is_founder(self, address: str | None) -> bool:
        return bool(address) and address.lower() in self.founder_emails

    def match(self, address: str | None) -> Client | None:
        """Known person first, then a client domain; never the founder's nor a consumer domain."""
        if not address or "@" not in address:
            return None
        address = address.lower()
        if address in self.persons:
            return self.clients[self.persons[address]]
        domain = address.rsplit("@", 1)[1]
        if domain == self.founder_domain or domain in CONSUMER_DOMAINS:
            return None
        for client in self.clients.values():
            if any(domain == d or domain.endswith("." + d) for d in client.domains):
                return client
        return None


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
