"""Stage `deploy`: the launch's contract decides the path (SPEC §9.1–9.3), then
`./deploy <target> --preprod` in the client's repository for the code path."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synedre import db
from synedre.config import Settings, get_settings
from synedre.db import pipeline as sql
from synedre.log import log
from synedre.orchestrate.contract import LeanContract, RichContract, apply_downgrade, code_path_decision, is_no_code
from synedre.orchestrate.deploy import DeployError, run_deploy
from synedre.pipeline import BY_NAME, Status

STAGE = BY_NAME["deploy"]


@dataclass(frozen=True)
class Decision:
    """What the contract says happens next: a status, its audit event and detail."""
    status: Status
    event: str
    detail: dict[str, Any]
    intent: str | None
    complexity: str | None


def contract_of(launch: dict[str, Any]) -> LeanContract:
    """The launch's stored contract (validated at the launch), with safe defaults if absent."""
    model = LeanContract if launch.get("system_prompt") == "lean" else RichContract
    return model.model_validate(launch.get("contract") or {})


def decide(intent: str | None, complexity: str | None, contract: LeanContract, target: str | None,
           base_url: str | None) -> Decision:
    """The pure decision (SPEC §9): downgrade, then no-code / analysis / anomaly / deploy."""
    new_intent, new_complexity = apply_downgrade(intent, complexity, contract)
    downgraded = (new_intent, new_complexity) != (intent, complexity)
    detail: dict[str, Any] = {"intent": new_intent, "complexity": new_complexity, "downgraded": downgraded}
    if is_no_code(new_intent, new_complexity):
        return Decision(Status.REPORT_DUE, "orchestrate_no_code", detail, new_intent, new_complexity)
    path = code_path_decision(contract)
    if path.startswith("orchestration_failed"):
        return Decision(Status.ORCHESTRATION_FAILED, "missing_tenant_or_routes",
                        {**detail, "commits": len(contract.commits), "tenant": contract.tenant}, new_intent,
                        new_complexity)
    if path == "no_code_analysis":
        return Decision(Status.REPORT_DUE, "orchestrate_analysis_deliverable", detail, new_intent, new_complexity)
    if not target or not base_url:
        return Decision(Status.ORCHESTRATION_FAILED, "no_deploy_target",
                        {**detail, "tenant": contract.tenant, "target": target, "preprod_url": base_url},
                        new_intent, new_complexity)
    return Decision(Status.DEPLOYED, "deploy_started", {**detail, "target": target}, new_intent, new_complexity)


def latest_launch(conn: Any, message_id: int) -> dict[str, Any] | None:
    return conn.execute("SELECT * FROM synedre.launches WHERE message_id = %s ORDER BY attempt DESC LIMIT 1",
                        (message_id,)).fetchone()


def topology(conn: Any, tenant: str | None) -> tuple[str | None, str | None]:
    """(deploy target, pre-production base URL) of the contract's tenant, from our database."""
    if not tenant:
        return None, None
    row = conn.execute(
        """SELECT coalesce(t.deploy_target, c.deploy_target) AS target, t.config->>'preprod_url' AS url
             FROM synedre.clients c LEFT JOIN synedre.tenant_topology t ON t.client_id = c.id
            WHERE c.codename = %s""", (tenant,)).fetchone()
    return (row["target"], row["url"]) if row else (None, None)


def run(message_id: int, s: Settings | None = None) -> Status | str:
    s = s or get_settings()
    with db.transaction() as conn:
        claim = sql.claim(conn, STAGE, message_id)
        if claim is None:
            return sql.why_not(conn, STAGE, message_id)
        launch = latest_launch(conn, message_id)
        contract = contract_of(launch or {})
        target, base_url = topology(conn, contract.tenant)
    state = claim.state
    with sql.working(claim):
        d = decide(state["intent"], state["complexity"], contract, target, base_url)
        if d.status != Status.DEPLOYED:
            with db.transaction() as conn:
                sql.write(conn, claim, d.status, d.event, d.detail, intent=d.intent, complexity=d.complexity)
            log.info(d.event, message=message_id, status=str(d.status))
            return d.status
        from synedre.spawn.stage import redactor

        repo = s.workspace_repo
        try:
            result = run_deploy(repo, target or "", s.deploy_timeout_s, redactor(s).redact_text) if repo else None
        except DeployError as exc:  # the contract named a target that is no tenant name
            with db.transaction() as conn:
                sql.write(conn, claim, Status.ORCHESTRATION_FAILED, "no_deploy_target", {**d.detail, "error": str(exc)})
            return Status.ORCHESTRATION_FAILED
        ok = bool(result and result.ok)
        with db.transaction() as conn:
            conn.execute(
                """INSERT INTO synedre.qa_runs (message_id, launch_id, iteration, target, base_url, deploy_ok,
                                                deploy_exit_code, deploy_log, verdict, ended_at)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, CASE WHEN %s THEN NULL ELSE now() END)
                   ON CONFLICT (launch_id) DO UPDATE SET deploy_ok = EXCLUDED.deploy_ok,
                     deploy_exit_code = EXCLUDED.deploy_exit_code, deploy_log = EXCLUDED.deploy_log,
                     verdict = EXCLUDED.verdict, ended_at = EXCLUDED.ended_at""",
                (message_id, launch["id"] if launch else None, launch["iteration"] if launch else 1, target,
                 base_url, ok, result.exit_code if result else None,
                 result.log_tail if result else "no repository configured (SYNEDRE_WORKSPACE_REPO)",
                 None if ok else "failed", ok))
            detail = {**d.detail, "exit_code": result.exit_code if result else None,
                      "timed_out": bool(result and result.timed_out),
                      "deploy_s": round(result.duration_s, 1) if result else None}
            if ok:
                sql.write(conn, claim, Status.DEPLOYED, "deployed", detail, intent=d.intent, complexity=d.complexity)
            else:  # a failed deploy is a failed check: the agent sees its log in the iteration
                sql.write(conn, claim, Status.QA_FAILED, "deploy_failed", detail, intent=d.intent,
                          complexity=d.complexity)
    log.info("deployed" if ok else "deploy_failed", message=message_id, target=target)
    return Status.DEPLOYED if ok else Status.QA_FAILED
