"""SQL for the directory: founder, clients, their people and chantiers (idempotent upserts)."""
from __future__ import annotations

from typing import Any

import psycopg
from pydantic import BaseModel, Field, model_validator


class Person(BaseModel):
    name: str | None = None
    email: str


class Client(BaseModel):
    codename: str
    name: str
    priority: str = "normal"
    mrr: float = Field(0, ge=0)
    status: str = "active"
    deploy_target: str | None = None
    domains: list[str] = []
    persons: list[Person] = []


class Founder(BaseModel):
    name: str
    emails: list[str]
    domain: str


class Chantier(BaseModel):
    codename: str
    client: str | None = None
    status: str = "open"
    title: str
    mission_letter: str | None = None


class Directory(BaseModel):
    founder: Founder
    atlas_mailbox: str
    clients: list[Client] = []
    chantiers: list[Chantier] = []

    @model_validator(mode="after")
    def _chantier_clients_exist(self) -> "Directory":
        known = {c.codename for c in self.clients}
        unknown = [f"{ch.codename} -> {ch.client}" for ch in self.chantiers
                   if ch.client and ch.client not in known]
        if unknown:
            raise ValueError(f"chantier client not in the file's clients: {', '.join(unknown)}")
        return self


def import_directory(conn: psycopg.Connection, d: Directory) -> dict[str, Any]:
    """Upsert everything in the caller's transaction; re-importing updates, never duplicates."""
    conn.execute(
        """INSERT INTO synedre.founder (id, name, emails, domain, atlas_address)
           VALUES (1, %s, %s, %s, %s)
           ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, emails = EXCLUDED.emails,
             domain = EXCLUDED.domain, atlas_address = EXCLUDED.atlas_address""",
        (d.founder.name, [e.lower() for e in d.founder.emails], d.founder.domain.lower(),
         d.atlas_mailbox.lower()))
    for c in d.clients:
        cid = conn.execute(
            """INSERT INTO synedre.clients (codename, name, priority, mrr, status, deploy_target, domains)
               VALUES (%s, %s, %s, %s, %s, %s, %s)
               ON CONFLICT (codename) DO UPDATE SET name = EXCLUDED.name,
                 priority = EXCLUDED.priority, mrr = EXCLUDED.mrr, status = EXCLUDED.status,
                 deploy_target = EXCLUDED.deploy_target, domains = EXCLUDED.domains
               RETURNING id""",
            (c.codename, c.name, c.priority, c.mrr, c.status, c.deploy_target,
             [x.lower() for x in c.domains])).fetchone()["id"]
        for p in c.persons:
            conn.execute(
                """INSERT INTO synedre.client_persons (client_id, name, email) VALUES (%s, %s, %s)
                   ON CONFLICT (email) DO UPDATE SET client_id = EXCLUDED.client_id,
                     name = EXCLUDED.name""",
                (cid, p.name, p.email.lower()))
        if c.deploy_target:
            conn.execute(
                """INSERT INTO synedre.tenant_topology (client_id, deploy_target) VALUES (%s, %s)
                   ON CONFLICT (client_id) DO UPDATE SET deploy_target = EXCLUDED.deploy_target""",
                (cid, c.deploy_target))
    for ch in d.chantiers:
        conn.execute(
            """INSERT INTO synedre.chantiers (codename, client_id, status, title, mission_letter)
               VALUES (%s, (SELECT id FROM synedre.clients WHERE codename = %s), %s, %s, %s)
               ON CONFLICT (codename) DO UPDATE SET client_id = EXCLUDED.client_id,
                 status = EXCLUDED.status, title = EXCLUDED.title,
                 mission_letter = EXCLUDED.mission_letter""",
            (ch.codename, ch.client, ch.status, ch.title, ch.mission_letter))
    return {"clients": len(d.clients), "persons": sum(len(c.persons) for c in d.clients),
            "chantiers": len(d.chantiers)}
