"""Stages `qa` and `qa_route` (SPEC §9.3–9.5): the contract's routes re-resolved against the
target's sitemap, then one check per route on any QA worker, joined in PostgreSQL.

`plan` claims the message, resolves the routes and writes one `qa_checks` row per page
(the declared routes that resolve to one page, or redirect to it, share its row, which names
them all; a route absent from the sitemap is failed there, without a browser run); the task
then enqueues one `qa_route` task per page to check. `check_one` claims one pending route of
the message (`FOR UPDATE SKIP LOCKED`: several workers share a message's routes), checks
it in Chromium with no transaction open, writes its result, and the last one to finish
moves the message to `qa_passed` or `qa_failed` with a conditional UPDATE.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from synedre import runner, secrets
from synedre.config import Settings, get_settings
from synedre.db import launches, proofs
from synedre.db.types import Conn
from synedre.log import log
from synedre.orchestrate import browser_thread, iso, qa
from synedre.orchestrate.contract import contract_of
from synedre.pipeline import BY_NAME, QaCheckStatus, Status

PLAN, ROUTE = BY_NAME["qa"], BY_NAME["qa_route"]
QA_DIR = PLAN.name  # under the message's private directory, the QA runs' proofs
CHECK_LEASE_S = 300  # a route claimed longer ago than this belongs to a dead QA worker


def shots_dir(s: Settings, message_id: int, run_id: int) -> Path:
    """The message's private directory for this run's proof (0700 all the way down)."""
    path = (s.state_dir / "messages" / str(message_id) / QA_DIR / f"run-{run_id}").resolve()
    path.parents[3].mkdir(parents=True, exist_ok=True)  # a fresh QA host has no state dir yet
    for p in (path.parents[2], path.parents[1], path.parent, path):
        p.mkdir(exist_ok=True, mode=0o700)
        os.chmod(p, 0o700)
    return path


@dataclass(frozen=True)
class _Loaded:
    launch: dict[str, Any]
    run: dict[str, Any]


@dataclass(frozen=True)
class _Planned:
    run_id: int
    routes: list[str]
    resolutions: list[qa.RouteResolution]
    checks: list[qa.PageCheck]
    sitemap_error: str | None


class PlanChecks(runner.StageCode[_Loaded, _Planned]):
    """The routes resolved against the sitemap, one `qa_checks` row per page to check."""
    stage = PLAN

    def __init__(self, s: Settings) -> None:
        self.s = s

    def load(self, conn: Conn, claim: runner.Claim) -> _Loaded:
        launch = launches.latest(conn, claim.message_id)
        if launch is None:
            raise LookupError(f"message {claim.message_id} is deployed but has no launch")
        return _Loaded(launch, _one(conn, "SELECT * FROM synedre.qa_runs WHERE launch_id = %s", launch["id"]))

    def work(self, claim: runner.Claim, x: _Loaded) -> _Planned:
        routes = list(getattr(contract_of(x.launch), "routes_to_qa", []))
        sitemap_error: str | None = None
        base, timeout = x.run["base_url"], self.s.qa_timeout_s
        try:
            resolutions = qa.resolve_routes(routes, qa.fetch_sitemap(base, timeout))
        except qa.SitemapError as exc:
            resolutions, sitemap_error = [], str(exc)[:300]
        checks = qa.plan_checks(resolutions, lambda path: qa.landing(base, path, timeout))
        return _Planned(x.run["id"], routes, resolutions, checks, sitemap_error)

    def write(self, conn: Conn, claim: runner.Claim, p: _Planned) -> runner.Done:
        for c in p.checks:
            first = c.routes[0]
            conn.execute(
                """INSERT INTO synedre.qa_checks (qa_run_id, declared, routes, resolved, resolution, status, reasons)
                   VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (qa_run_id, declared) DO NOTHING""",
                (p.run_id, first.declared, [r.declared for r in c.routes], c.page, first.reason,
                 str(QaCheckStatus.FAILED if c.page is None else QaCheckStatus.PENDING),
                 Jsonb([first.reason] if c.page is None else [])))
        pending = _one(conn, "SELECT count(*) AS n FROM synedre.qa_checks WHERE qa_run_id = %s"
                             " AND status = %s", p.run_id, str(QaCheckStatus.PENDING))["n"]
        detail = {"routes": p.routes, "resolved": {r.declared: [r.resolved, r.reason] for r in p.resolutions},
                  "pages": {c.page: [r.declared for r in c.routes] for c in p.checks if c.page},
                  "to_check": pending}
        if p.sitemap_error is None and pending > 0:
            return runner.Done(Status.QA, "qa_planned", detail)
        _verdict(conn, p.run_id, passed=False, only_iso=False)
        return runner.Done(Status.QA_FAILED, detail={
            **detail, "to_check": 0,
            "reason": p.sitemap_error and f"sitemap: {p.sitemap_error}" or "no declared route is in the sitemap"})


def plan(message_id: int, s: Settings | None = None) -> tuple[runner.Result, int]:
    """(the result, routes left to check: one `qa_route` task each)."""
    result = runner.run(PlanChecks(s or get_settings()), message_id)
    return result, int(result.detail["to_check"]) if isinstance(result, runner.Done) else 0


@dataclass(frozen=True)
class _Check:
    """One route claimed for this worker: its row, its run, the page's mock-up here."""
    row: dict[str, Any]
    run: dict[str, Any]
    mockup: Path | None


@dataclass(frozen=True)
class _Checked:
    check: _Check
    result: qa.RouteResult | None
    reasons: list[str]
    detail: dict[str, Any]
    shot: bytes | None
    diff: bytes | None


class CheckRoute(runner.StageCode[_Check, _Checked]):
    """Check one route of the message in Chromium; the last check to finish moves the message
    to its verdict (a concurrent last one finds it moved)."""
    stage = ROUTE

    def __init__(self, s: Settings) -> None:
        self.s = s

    def load(self, conn: Conn, claim: runner.Claim) -> _Check | runner.Skip:
        row = conn.execute(
            f"""UPDATE synedre.qa_checks SET status = %(running)s, claimed_at = now()
                 WHERE id = (SELECT c.id FROM synedre.qa_checks c
                               JOIN synedre.qa_runs r ON r.id = c.qa_run_id
                              WHERE r.message_id = %(id)s AND r.verdict IS NULL
                                AND (c.status = %(pending)s OR (c.status = %(running)s
                                     AND c.claimed_at < now() - interval '{CHECK_LEASE_S} seconds'))
                              ORDER BY c.id LIMIT 1 FOR UPDATE OF c SKIP LOCKED)
             RETURNING id, qa_run_id, routes, resolved""",
            {"id": claim.message_id, "running": str(QaCheckStatus.RUNNING),
             "pending": str(QaCheckStatus.PENDING)}).fetchone()
        if row is None:
            return runner.Skip("no route left to check")
        run = _one(conn, "SELECT * FROM synedre.qa_runs WHERE id = %s", row["qa_run_id"])
        return _Check(row, run, _mockup(conn, claim.message_id, row["resolved"], row["routes"]))

    def work(self, claim: runner.Claim, c: _Check) -> _Checked:
        s = self.s
        shot = shots_dir(s, claim.message_id, c.run["id"]) / f"check-{c.row['id']}.png"
        try:
            redact = secrets.redactor(s).redact_text
            result = browser_thread.run(
                lambda b: qa.check_route(c.run["base_url"], c.row["resolved"], shot, s.qa_timeout_s, c.mockup,
                                         s.iso_threshold, browser=b, redact=redact), s.qa_timeout_s)
            reasons, detail = list(result.reasons), _detail(result)
        except (qa.BrowserUnavailable, iso.IsoError) as exc:  # no browser here, an unreadable mock-up
            result, reasons, detail = None, ["browser_error"], {"error": str(exc)[:300]}
        return _Checked(c, result, reasons, detail, *_proof_bytes(result))

    def write(self, conn: Conn, claim: runner.Claim, done: _Checked) -> runner.Result:
        r, row = done.result, done.check.row
        conn.execute(
            """UPDATE synedre.qa_checks SET status = %s, reasons = %s, detail = %s, http_status = %s,
                      screenshot = %s, diff_image = %s, screenshot_proof = %s, diff_proof = %s
                WHERE id = %s AND status = %s""",
            (str(QaCheckStatus.FAILED if done.reasons else QaCheckStatus.PASSED), Jsonb(done.reasons),
             Jsonb(done.detail), r.http_status if r else None, str(r.screenshot) if r and r.screenshot else None,
             str(r.iso.diff_image) if r and r.iso and r.iso.diff_image else None,
             done.shot and proofs.store(conn, done.shot, "screenshot"),
             done.diff and proofs.store(conn, done.diff, "diff"), row["id"], str(QaCheckStatus.RUNNING)))
        return _last_check(conn, done.check.run["id"], row["resolved"])

    def after(self, claim: runner.Claim, worked: object, result: runner.Done | runner.Held) -> None:
        if isinstance(result, runner.Done):
            log.info("qa_verdict", message=claim.message_id, passed=result.status == Status.QA_PASSED,
                     reasons=result.detail["reasons"])


def check_one(message_id: int, s: Settings | None = None) -> runner.Result:
    """Check one route of the message; Done with the verdict when this check was the last."""
    return runner.run(CheckRoute(s or get_settings()), message_id)


def _last_check(conn: Conn, run_id: int, route: str) -> runner.Result:
    """When no route of the run is left, the verdict (the runner moves the message on)."""
    left = _one(conn, "SELECT count(*) AS n FROM synedre.qa_checks WHERE qa_run_id = %s AND status = ANY(%s)",
                run_id, [str(QaCheckStatus.PENDING), str(QaCheckStatus.RUNNING)])["n"]
    if left:
        return runner.Skip(f"checked {route}; {left} route(s) left")
    checks = conn.execute("SELECT status, reasons FROM synedre.qa_checks WHERE qa_run_id = %s", (run_id,)).fetchall()
    passed = all(c["status"] == QaCheckStatus.PASSED for c in checks)
    failed_reasons = {r for c in checks for r in c["reasons"]}
    only_iso = not passed and failed_reasons == {iso.ISO_MISMATCH}
    _verdict(conn, run_id, passed=passed, only_iso=only_iso)
    return runner.Done(Status.QA_PASSED if passed else Status.QA_FAILED,
                       detail={"routes": len(checks), "reasons": sorted(failed_reasons), "only_iso_mismatch": only_iso})


def _one(conn: Any, query: str, *args: Any) -> dict[str, Any]:
    row = conn.execute(query, args).fetchone()
    if row is None:
        raise LookupError(f"expected a row: {query[:60]}")
    return row


def _verdict(conn: Any, run_id: int, *, passed: bool, only_iso: bool) -> None:
    conn.execute("UPDATE synedre.qa_runs SET verdict = %s, only_iso_mismatch = %s, ended_at = now() WHERE id = %s",
                 ("passed" if passed else "failed", only_iso, run_id))


def _mockup(conn: Any, message_id: int, resolved: str, declared: list[str]) -> Path | None:
    """The page's mock-up (registered for the page, else for one of its declared routes, in
    their order) as a file on this host (fetched from the database into its cache: it may
    have been registered on another host)."""
    names = [resolved, *(qa.normalize_path(d) for d in declared)]
    row = conn.execute(
        """SELECT m.path, m.proof FROM synedre.mockups m
             JOIN synedre.email_states e ON e.chantier_id = m.chantier_id
            WHERE e.message_id = %s AND m.route = ANY(%s) ORDER BY array_position(%s, m.route) LIMIT 1""",
        (message_id, names, names)).fetchone()
    return Path(str(proofs.readable(conn, row["proof"], row["path"], "mockup.png"))) if row else None


def _proof_bytes(r: qa.RouteResult | None) -> tuple[bytes | None, bytes | None]:
    """The screenshot and diff image this host just wrote, read before the transaction that stores them."""
    shot = r.screenshot.read_bytes() if r and r.screenshot else None
    diff = r.iso.diff_image.read_bytes() if r and r.iso and r.iso.diff_image else None
    return shot, diff


def _detail(r: qa.RouteResult) -> dict[str, Any]:
    out: dict[str, Any] = {"console_errors": list(r.console_errors), "page_errors": list(r.page_errors),
                           "failed_requests": list(r.failed_requests)}
    if r.error:
        out["error"] = r.error
    if r.iso is not None:
        out["iso"] = {"mismatch_ratio": round(r.iso.mismatch_ratio, 4), "threshold": r.iso.threshold,
                      "mismatched_pixels": r.iso.mismatched_pixels, "compared_pixels": r.iso.compared_pixels,
                      "compared_size": list(r.iso.compared_size), "region": list(r.iso.region or []) or None,
                      "heights": list(r.iso.heights)}
    return out
