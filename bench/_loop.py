"""What the benchmarks after the launch share: a client site to deploy and check, messages
prepared at a status, percentiles.

They use Redis database 10 unless SYNEDRE_BENCH_REDIS_URL says otherwise (the other
benchmarks use 9), so they can run beside those; _stack.py flushes it before and after.
"""
from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import time
from pathlib import Path

# Before _stack reads it (it sets the broker of this process and its workers at import).
os.environ.setdefault("SYNEDRE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/10")

import psycopg  # noqa: E402
from _stack import CORPUS, corpus_messages, services, stack  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from tests.services.site import Site, page, start_site  # noqa: E402

__all__ = ["CORPUS", "corpus_messages", "services", "stack", "site_with_pages", "publish", "add_client",
           "deployed_message", "pct", "wait_status"]

TARGET = "acme"
_UIDVALIDITY = itertools.count(7000)


def pct(values: list[float], p: int) -> float:
    """The p-th percentile (inclusive method: within the sample's range even for 20 values)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def site_with_pages(root: Path, n: int) -> tuple[Site, list[str]]:
    """The fixture's site plus `n` pages of its own, committed and published (the deploy
    script writes the sitemap from the pages); returns the site and the `n` routes."""
    site = start_site(root, TARGET)
    pages = {f"site/pages/page-{i:02d}.html": page(f"Page {i}", f"<p>Contenu de la page {i}.</p>"
                                                   '<img src="/logo.png" alt="logo" width="120" height="40">')
             for i in range(1, n + 1)}
    site.commit(pages, f"{n} pages")
    publish(site)
    return site, [f"/pages/page-{i:02d}" for i in range(1, n + 1)]


def publish(site: Site) -> None:
    subprocess.run(["./deploy", site.target, "--preprod"], cwd=site.repo, check=True, capture_output=True,
                   timeout=60)


def add_client(pg_url: str, site: Site) -> None:
    """Client `acme`, whose pre-production is the site (what the e2e fixture inserts)."""
    with psycopg.connect(pg_url, autocommit=True) as c:
        cid = c.execute("INSERT INTO synedre.clients (codename, name, deploy_target) VALUES (%s, 'Acme', %s)"
                        " RETURNING id", (TARGET, TARGET)).fetchone()[0]
        c.execute("INSERT INTO synedre.tenant_topology (client_id, deploy_target, config) VALUES (%s, %s, %s)",
                  (cid, TARGET, Jsonb(site.topology())))


def deployed_message(pg_url: str, state_dir: str, site: Site, routes: list[str], tag: str) -> int:
    """A message as the deploy stage leaves it: status `deployed`, a finished launch whose
    contract declares `routes`, and its qa_runs row (deploy_ok) naming the site."""
    from synedre.config import Settings
    from synedre.stages.poll import ingest_one

    Path(state_dir).mkdir(parents=True, exist_ok=True)  # the workers' state dir (QA screenshots)
    uidvalidity = next(_UIDVALIDITY)
    raw = corpus_messages(1, f"{tag}-{uidvalidity}", clean=True)[0]
    mid = ingest_one(raw, "atlas", uidvalidity, 1, Settings(state_dir=state_dir), lambda _: None)
    if mid is None:
        raise RuntimeError("the bench message was taken for a delivery already stored")
    contract = {"ok": True, "tenant": TARGET, "routes_to_qa": routes, "commits": ["0000000"],
                "summary_md": "bench", "draft_reply_for_user": "bench"}
    with psycopg.connect(pg_url, autocommit=True) as c:
        run = c.execute("INSERT INTO synedre.runs (ref_type, ref_id, title, complexity)"
                        " VALUES ('atlas_inbox', %s, 'bench', 'plan') RETURNING id", (str(mid),)).fetchone()[0]
        c.execute("UPDATE synedre.email_states SET status = 'deployed', intent = 'run', complexity = 'plan',"
                  " confidence = 0.9, rationale = 'bench', run_id = %s, launch_attempt = 1, status_at = now()"
                  " WHERE message_id = %s", (run, mid))
        launch = c.execute(
            "INSERT INTO synedre.launches (message_id, attempt, iteration, status, system_prompt, contract,"
            " stop_reason, ended_at) VALUES (%s, 1, 1, 'succeeded', 'plan', %s, 'success', now()) RETURNING id",
            (mid, Jsonb(contract))).fetchone()[0]
        c.execute("INSERT INTO synedre.qa_runs (message_id, launch_id, iteration, target, base_url, deploy_ok,"
                  " deploy_exit_code) VALUES (%s, %s, 1, %s, %s, true, 0)", (mid, launch, TARGET, site.url))
    return mid


def wait_status(db: psycopg.Connection, mid: int, statuses: set[str], timeout: float,
                interval: float = 0.02) -> tuple[str, float]:
    """(the status reached, time.perf_counter() when it was seen)."""
    def reached():
        row = db.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (mid,)).fetchone()
        return row[0] if row and row[0] in statuses else None
    status = stack.wait_for(reached, timeout, f"message {mid} to reach {sorted(statuses)}", interval)
    return status, time.perf_counter()
