"""Stage `deploy`: the launch's contract decides the path (SPEC §9.1–9.3), then
`./deploy <target> --preprod` in the client's repository for the code path."""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Any

from synedre import runner, secrets
from synedre.config import Settings, get_settings
from synedre.db import launches, tenants
from synedre.db.types import Conn
from synedre.log import log
from synedre.orchestrate.contract import (
    CodePath,
    LeanContract,
    apply_downgrade,
    code_path_decision,
    contract_of,
    is_no_code,
)
from synedre.orchestrate.deploy import DeployError, DeployResult, run_deploy
from synedre.pipeline import BY_NAME, Status
from synedre.spawn import repos
from synedre.spawn.workspace import WorkspaceError

STAGE = BY_NAME["deploy"]


@dataclass(frozen=True)
class Decision:
    """What the contract says happens next: a status, its audit event and detail."""
    status: Status
    event: str
    detail: dict[str, Any]
    intent: str | None
    complexity: str | None


def decide(intent: str | None, complexity: str | None, contract: LeanContract, target: str | None,
           base_url: str | None) -> Decision:
    """The pure decision (SPEC §9): downgrade, then no-code / analysis / anomaly / deploy."""
    new_intent, new_complexity = apply_downgrade(intent, complexity, contract)
    downgraded = (new_intent, new_complexity) != (intent, complexity)
    detail: dict[str, Any] = {"intent": new_intent, "complexity": new_complexity, "downgraded": downgraded}
    if is_no_code(new_intent, new_complexity):
        return Decision(Status.REPORT_DUE, "orchestrate_no_code", detail, new_intent, new_complexity)
    path = code_path_decision(contract)
    if path == CodePath.MISSING_TENANT_OR_ROUTES:
        return Decision(Status.ORCHESTRATION_FAILED, "missing_tenant_or_routes",
                        {**detail, "commits": len(contract.commits), "tenant": contract.tenant}, new_intent,
                        new_complexity)
    if path == CodePath.ANALYSIS:
        return Decision(Status.REPORT_DUE, "orchestrate_analysis_deliverable", detail, new_intent, new_complexity)
    if not target or not base_url:
        return Decision(Status.ORCHESTRATION_FAILED, "no_deploy_target",
                        {**detail, "tenant": contract.tenant, "target": target, "preprod_url": base_url},
                        new_intent, new_complexity)
    return Decision(Status.DEPLOYED, "deploy_started", {**detail, "target": target}, new_intent, new_complexity)


def topology(conn: Any, tenant: str | None) -> tuple[str | None, str | None]:
    """(deploy target, pre-production base URL) of the contract's tenant, from our database."""
    if not tenant:
        return None, None
    row = conn.execute(
        """SELECT coalesce(t.deploy_target, c.deploy_target) AS target, t.config->>'preprod_url' AS url
             FROM synedre.clients c LEFT JOIN synedre.tenant_topology t ON t.client_id = c.id
            WHERE c.codename = %s""", (tenant,)).fetchone()
    return (row["target"], row["url"]) if row else (None, None)


@dataclass(frozen=True)
class _Loaded:
    launch: dict[str, Any] | None
    contract: LeanContract
    target: str | None
    base_url: str | None
    repo: str | None = None  # the launch's repository, its client's (None: the fleet's default)
    foreign: str | None = None  # set: the contract's tenant is another client's, in another repository


def run(message_id: int, s: Settings | None = None) -> runner.Result:
    s = s or get_settings()
    return runner.run(STAGE, message_id, _load, lambda claim, loaded: _work(claim, loaded, s))


def _load(conn: Conn, claim: runner.Claim) -> _Loaded:
    launch = launches.latest(conn, claim.message_id)
    contract = contract_of(launch or {})
    client, repo = tenants.repo_of_message(conn, claim.message_id)
    owner, tenant_repo = tenants.repo_of_tenant(conn, contract.tenant)
    foreign = (tenant_repo or "SYNEDRE_WORKSPACE_REPO") if owner not in (None, client) and tenant_repo != repo else None
    return _Loaded(launch, contract, *topology(conn, contract.tenant), repo=repo, foreign=foreign)


def _work(claim: runner.Claim, x: _Loaded, s: Settings) -> runner.Done | runner.Write:
    d = decide(claim.state["intent"], claim.state["complexity"], x.contract, x.target, x.base_url)
    fields = {"intent": d.intent, "complexity": d.complexity}
    if d.status != Status.DEPLOYED:
        return runner.Done(d.status, d.event, d.detail, fields,
                           then=lambda: log.info(d.event, message=claim.message_id, status=str(d.status)))
    if x.foreign:  # the launch worked in one repository: never deploy another client's
        return runner.Done(Status.ORCHESTRATION_FAILED, "tenant_repository_mismatch",
                           {**d.detail, "tenant": x.contract.tenant, "launch_repo": x.repo or "SYNEDRE_WORKSPACE_REPO",
                            "tenant_repo": x.foreign})
    try:
        result = _deploy(x, s)
    except DeployError as exc:  # the contract named a target that is no tenant name
        return runner.Done(Status.ORCHESTRATION_FAILED, "no_deploy_target", {**d.detail, "error": str(exc)})
    ok = bool(result and result.ok)

    def write(conn: Conn) -> runner.Done:
        _record_run(conn, claim.message_id, x, result, ok)
        detail = {**d.detail, "exit_code": result.exit_code if result else None,
                  "timed_out": bool(result and result.timed_out),
                  "deploy_s": round(result.duration_s, 1) if result else None}
        # a failed deploy is a failed check: the agent sees its log in the iteration
        return runner.Done(Status.DEPLOYED if ok else Status.QA_FAILED, None if ok else "deploy_failed",
                           detail, fields, then=lambda: log.info(str(Status.DEPLOYED) if ok else "deploy_failed",
                                                                 message=claim.message_id, target=x.target))
    return write


def _deploy(x: _Loaded, s: Settings) -> DeployResult | None:
    """`./deploy` in the launch's repository (for a remote, this host's checkout of what was
    pushed); None when no repository is configured at all."""
    repo = repos.locate(x.repo, s, repos.CHECKOUTS)
    if repo is None:
        return None
    redact = secrets.redactor(s).redact_text
    started, wait_s = time.monotonic(), s.deploy_timeout_s + repos.REMOTE_TIMEOUT_S  # another deploy of it first
    try:
        with repos.deployable(repo, s.workspace_base_branch, wait_s) as path:
            return run_deploy(path, x.target or "", s.deploy_timeout_s, redact)
    except (WorkspaceError, OSError, subprocess.SubprocessError) as exc:  # the remote could not be fetched
        return DeployResult(ok=False, exit_code=None, timed_out=False, duration_s=time.monotonic() - started,
                            log_tail=redact(f"{repo.remote or repo.path}: not deployable: {exc}"))


def _record_run(conn: Conn, message_id: int, x: _Loaded, result: DeployResult | None, ok: bool) -> None:
    """The QA run of this launch, with the deploy's outcome (its verdict now when it failed)."""
    launch = x.launch
    conn.execute(
        """INSERT INTO synedre.qa_runs (message_id, launch_id, iteration, target, base_url, deploy_ok,
                                        deploy_exit_code, deploy_log, verdict, ended_at)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, CASE WHEN %s THEN NULL ELSE now() END)
           ON CONFLICT (launch_id) DO UPDATE SET deploy_ok = EXCLUDED.deploy_ok,
             deploy_exit_code = EXCLUDED.deploy_exit_code, deploy_log = EXCLUDED.deploy_log,
             verdict = EXCLUDED.verdict, ended_at = EXCLUDED.ended_at""",
        (message_id, launch["id"] if launch else None, launch["iteration"] if launch else 1, x.target,
         x.base_url, ok, result.exit_code if result else None,
         result.log_tail if result else "no repository configured (SYNEDRE_WORKSPACE_REPO)",
         None if ok else "failed", ok))
