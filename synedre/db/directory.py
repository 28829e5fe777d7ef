"""The directory: founder, clients, their people and chantiers.

`Directory` / `Client` are what the stages read (`load`); `DirectoryFile` is the JSON
file `synedre directory import` upserts (idempotent), `directory.example.json` at the
project's root shows every field.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from psycopg.types.json import Jsonb
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from synedre.db.tenants import ENV_NAME_RE, HOST_RE, check_repo, masked
from synedre.db.types import Conn, Row

# Anyone can open an address there: a domain match on them proves nothing.
CONSUMER_DOMAINS = frozenset("""
gmail.com googlemail.com hotmail.com hotmail.fr outlook.com outlook.fr live.com live.fr msn.com
yahoo.com yahoo.fr icloud.com me.com mac.com aol.com gmx.com gmx.fr protonmail.com proton.me
free.fr orange.fr wanadoo.fr sfr.fr neuf.fr laposte.net bbox.fr numericable.fr club-internet.fr
""".split())

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
        return bool(address and address.lower() in self.founder_emails)

    def by_id(self, client_id: int | None) -> Client | None:
        return next((c for c in self.clients.values() if c.id == client_id), None)

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


def load(conn: Conn) -> Directory:
    """The directory as the stages read it, in the caller's transaction: its three queries
    sent together (pipeline mode), one round trip."""
    with conn.pipeline():
        founders = conn.execute("SELECT emails, domain, atlas_address FROM synedre.founder")
        client_rows = conn.execute("SELECT * FROM synedre.clients")
        person_rows = conn.execute("SELECT email, client_id FROM synedre.client_persons")
    founder = founders.fetchone()
    clients = {r["codename"]: Client(r["id"], r["codename"], r["name"], r["priority"], float(r["mrr"]),
                                     r["status"], tuple(r["domains"]))
               for r in client_rows.fetchall()}
    by_id = {c.id: c.codename for c in clients.values()}
    persons = {r["email"]: by_id[r["client_id"]] for r in person_rows.fetchall()}
    if founder is None:
        return Directory(frozenset(), "", "", clients, persons)
    return Directory(frozenset(founder["emails"]), founder["domain"], founder["atlas_address"],
                     clients, persons)


class DirectoryError(ValueError):
    """A directory file that cannot be imported: one line per problem, by its place in the file."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not a silent default


class PersonEntry(_Entry):
    name: str | None = None
    email: str

    @field_validator("email")
    @classmethod
    def _an_address(cls, v: str) -> str:
        if v.count("@") != 1 or not all(v.split("@")):
            raise ValueError("not an email address")
        return v


# The deploy sandbox's lists (SPEC §13): what an entry of each must be, and its error's words.
SANDBOX_LISTS: dict[str, tuple[Callable[[str], object], str]] = {
    "deploy_hosts": (HOST_RE.fullmatch, "are host or host:port, without scheme nor path"),
    "deploy_env": (lambda n: ENV_NAME_RE.fullmatch(n) and not n.upper().startswith("SYNEDRE_"),
                   "names environment variables, never the fleet's own SYNEDRE_*"),
    "infra_paths": (lambda p: p.strip() and not p.startswith("/") and ".." not in p.split("/"),
                    "are paths inside the repository"),
}


class ClientEntry(_Entry):
    codename: str = Field(min_length=1)
    name: str
    priority: Literal["high", "normal", "low"] = "normal"
    mrr: float = Field(0, ge=0)
    status: str = "active"
    # the tenant: what `./deploy <target> --preprod` deploys, where QA finds the result, and
    # the repository its agents work in (SYNEDRE_WORKSPACE_REPO when absent)
    deploy_target: str | None = None
    preprod_url: str | None = None
    repo: str | None = None
    # the deploy's sandbox (SPEC §13): the hosts `./deploy` may reach (`host` or `host:port`,
    # none when empty), the variables of the fleet's environment it gets (by name), and the
    # paths besides `deploy` whose change waits for the founder's OK before a deploy
    deploy_hosts: list[str] = []
    deploy_env: list[str] = []
    infra_paths: list[str] = []
    domains: list[str] = []
    persons: list[PersonEntry] = []

    @field_validator(*SANDBOX_LISTS)
    @classmethod
    def _sandbox_entries(cls, v: list[str], info: ValidationInfo) -> list[str]:
        fits, rule = SANDBOX_LISTS[info.field_name or ""]
        bad = [e for e in v if not fits(e)]
        if bad:
            raise ValueError(f"{info.data.get('codename', '?')}: {info.field_name} {rule} (got {bad[0][:60]!r})")
        return v

    @field_validator("preprod_url")
    @classmethod
    def _a_site(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not (v.startswith(("http://", "https://")) and len(v.split("/")) > 2 and v.split("/")[2]):
            raise ValueError(f"{info.data.get('codename', '?')}: preprod_url is an http:// or https:// URL")
        return v

    @field_validator("repo")
    @classmethod
    def _a_repository(cls, v: str | None, info: ValidationInfo) -> str | None:
        try:
            return None if v is None else check_repo(v)
        except ValueError as exc:
            raise ValueError(f"{info.data.get('codename', '?')}: {exc}") from None

    @model_validator(mode="after")
    def _a_tenant(self) -> ClientEntry:
        if (self.repo or self.preprod_url) and not self.deploy_target:
            given = " and ".join(k for k in ("preprod_url", "repo") if getattr(self, k))
            raise ValueError(f"{self.codename}: {given} without a deploy_target (the tenant they belong to)")
        return self


class FounderEntry(_Entry):
    name: str
    emails: list[str] = Field(min_length=1)
    domain: str


class ChantierEntry(_Entry):
    codename: str = Field(min_length=1)
    client: str | None = None
    status: Literal["open", "paused", "closed"] = "open"
    title: str
    mission_letter: str | None = None


def parse_file(raw: bytes) -> DirectoryFile:
    """The file, or DirectoryError with each problem as `clients[1].mrr: …` (no schema dump)."""
    try:
        return DirectoryFile.model_validate_json(raw)
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
            why = str(e["msg"]).removeprefix("Value error, ")
            value = e["input"][:60] if isinstance(e["input"], str) else e["input"]
            if e["loc"][-1:] == ("repo",) and isinstance(value, str):
                value = masked(e["input"])[:60]  # a password in a URL is refused, never echoed
            shown = isinstance(value, str | int | float) and e["type"] not in ("missing", "json_invalid")
            got = f" (got {value!r})" if shown else ""
            lines.append(f"{where or 'the file'}: {why[:1].lower()}{why[1:]}{got}")
        raise DirectoryError("; ".join(lines)) from None


class DirectoryFile(_Entry):
    founder: FounderEntry
    atlas_mailbox: str
    clients: list[ClientEntry] = []
    chantiers: list[ChantierEntry] = []

    @model_validator(mode="after")
    def _chantier_clients_exist(self) -> DirectoryFile:
        known = {c.codename for c in self.clients}
        unknown = [f"{ch.codename} -> {ch.client}" for ch in self.chantiers
                   if ch.client and ch.client not in known]
        if unknown:
            raise ValueError(f"chantier client not in the file's clients: {', '.join(unknown)}")
        return self


def import_directory(conn: Conn, d: DirectoryFile) -> dict[str, Any]:
    """Upsert everything in the caller's transaction; re-importing updates, never duplicates."""
    conn.execute(
        """INSERT INTO synedre.founder (id, name, emails, domain, atlas_address)
           VALUES (1, %s, %s, %s, %s)
           ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, emails = EXCLUDED.emails,
             domain = EXCLUDED.domain, atlas_address = EXCLUDED.atlas_address""",
        (d.founder.name, [e.lower() for e in d.founder.emails], d.founder.domain.lower(),
         d.atlas_mailbox.lower()))
    for c in d.clients:
        upserted = conn.execute(
            """INSERT INTO synedre.clients (codename, name, priority, mrr, status, deploy_target, domains)
               VALUES (%s, %s, %s, %s, %s, %s, %s)
               ON CONFLICT (codename) DO UPDATE SET name = EXCLUDED.name,
                 priority = EXCLUDED.priority, mrr = EXCLUDED.mrr, status = EXCLUDED.status,
                 deploy_target = EXCLUDED.deploy_target, domains = EXCLUDED.domains
               RETURNING id""",
            (c.codename, c.name, c.priority, c.mrr, c.status, c.deploy_target,
             [x.lower() for x in c.domains])).fetchone()
        assert upserted is not None  # an upsert's RETURNING always has its row
        cid = upserted["id"]
        for p in c.persons:
            conn.execute(
                """INSERT INTO synedre.client_persons (client_id, name, email) VALUES (%s, %s, %s)
                   ON CONFLICT (email) DO UPDATE SET client_id = EXCLUDED.client_id,
                     name = EXCLUDED.name""",
                (cid, p.name, p.email.lower()))
        if c.deploy_target:
            conn.execute(
                """INSERT INTO synedre.tenant_topology (client_id, deploy_target, config)
                   VALUES (%s, %s, jsonb_strip_nulls(jsonb_build_object(
                     'preprod_url', %s::text, 'repo', %s::text, 'deploy_hosts', %s::jsonb, 'deploy_env', %s::jsonb,
                     'infra_paths', %s::jsonb)))
                   ON CONFLICT (client_id) DO UPDATE SET deploy_target = EXCLUDED.deploy_target,
                     config = tenant_topology.config - 'preprod_url' - 'repo' - 'deploy_hosts' - 'deploy_env'
                              - 'infra_paths' || EXCLUDED.config""",
                (cid, c.deploy_target, c.preprod_url, c.repo,
                 *(Jsonb(v) if v else None for v in (c.deploy_hosts, c.deploy_env, c.infra_paths))))
    for ch in d.chantiers:
        conn.execute(
            """INSERT INTO synedre.chantiers (codename, client_id, status, title, mission_letter)
               VALUES (%s, (SELECT id FROM synedre.clients WHERE codename = %s), %s, %s, %s)
               ON CONFLICT (codename) DO UPDATE SET client_id = EXCLUDED.client_id,
                 status = EXCLUDED.status, title = EXCLUDED.title,
                 mission_letter = EXCLUDED.mission_letter""",
            (ch.codename, ch.client, ch.status, ch.title, ch.mission_letter))
    return {"clients": len(d.clients), "persons": sum(len(c.persons) for c in d.clients),
            "tenants": sum(1 for c in d.clients if c.deploy_target), "chantiers": len(d.chantiers)}


def client_id(conn: Conn, codename: str) -> int | None:
    row = conn.execute("SELECT id FROM synedre.clients WHERE codename = %s", (codename,)).fetchone()
    return int(row["id"]) if row else None


def overview(conn: Conn) -> tuple[Row | None, list[Row], list[Row]]:
    """(the founder, the clients with their people and tenant, the chantiers) as `synedre
    directory show` lists them, each row's columns in display order."""
    founder = conn.execute("SELECT name, emails, atlas_address FROM synedre.founder").fetchone()
    clients = conn.execute(
        """SELECT c.codename, c.name, c.priority, c.status, coalesce(t.deploy_target, c.deploy_target) AS target,
                  t.config->>'preprod_url' AS preprod, array_to_string(c.domains, ' ') AS domains,
                  (SELECT string_agg(p.email, ' ' ORDER BY p.email) FROM synedre.client_persons p
                    WHERE p.client_id = c.id) AS persons
             FROM synedre.clients c LEFT JOIN synedre.tenant_topology t ON t.client_id = c.id
            ORDER BY c.codename""").fetchall()
    chantiers = conn.execute("SELECT h.codename, h.status, c.codename AS client, h.title FROM synedre.chantiers h"
                             " LEFT JOIN synedre.clients c ON c.id = h.client_id ORDER BY h.codename").fetchall()
    return founder, clients, chantiers


def chantier_id(conn: Conn, codename: str) -> int | None:
    row = conn.execute("SELECT id FROM synedre.chantiers WHERE codename = %s", (codename,)).fetchone()
    return int(row["id"]) if row else None


def set_mockup(conn: Conn, chantier: int, route: str, path: str, proof: str) -> None:
    """The mock-up QA compares a chantier's route with (replacing the route's previous one)."""
    conn.execute("INSERT INTO synedre.mockups (chantier_id, route, path, proof) VALUES (%s, %s, %s, %s)"
                 " ON CONFLICT (chantier_id, route) DO UPDATE SET path = EXCLUDED.path, proof = EXCLUDED.proof",
                 (chantier, route, path, proof))
