"""Stage `deploy`: the launch's contract decides the path (SPEC §9.1–9.3), then
`./deploy <target> --preprod` in the client's repository for the code path."""
from __future__ import annotations

import dataclasses
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from synedre import runner, secrets
from synedre.approvals import decisions
from synedre.config import Settings, get_settings, secret_from_env
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
from synedre.orchestrate.deploy import Confinement, DeployError, DeployResult, preflight, run_deploy
from synedre.pipeline import BY_NAME, Status
from synedre.redact import Redactor
from synedre.spawn import launcher, repos
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


@dataclass(frozen=True)
class Topology:
    """The contract's tenant as the directory declares it."""
    target: str | None = None
    base_url: str | None = None
    hosts: tuple[str, ...] = ()     # deploy_hosts: what the deploy's sandbox lets it reach
    env: tuple[str, ...] = ()       # deploy_env: the variables it gets, by name
    infra: tuple[str, ...] = ()     # infra_paths: beside ./deploy, what a change of waits for the founder


def topology(conn: Any, tenant: str | None) -> Topology:
    """The contract's tenant, from our database."""
    if not tenant:
        return Topology()
    row = conn.execute(
        """SELECT coalesce(t.deploy_target, c.deploy_target) AS target, t.config->>'preprod_url' AS url,
                  coalesce(t.config->'deploy_hosts', '[]') AS hosts, coalesce(t.config->'deploy_env', '[]') AS env,
                  coalesce(t.config->'infra_paths', '[]') AS infra
             FROM synedre.clients c LEFT JOIN synedre.tenant_topology t ON t.client_id = c.id
            WHERE c.codename = %s""", (tenant,)).fetchone()
    if row is None:
        return Topology()
    return Topology(row["target"], row["url"], tuple(row["hosts"]), tuple(row["env"]), tuple(row["infra"]))


@dataclass(frozen=True)
class _Loaded:
    launch: dict[str, Any] | None
    contract: LeanContract
    tenant: Topology
    repo: str | None = None  # the launch's repository, its client's (None: the fleet's default)
    foreign: str | None = None  # set: the contract's tenant is another client's, in another repository
    guard: Guard | None = None


@dataclass(frozen=True)
class Guard:
    """What decides whether this deploy waits for the founder (policy rule `touches_deploy`)."""
    asks: bool              # the rule is on
    approved: int | None    # the founder's OK for this launch's deploy, if given
    baseline: str | None    # the commit last deployed with its script accepted (None: never)


@dataclass(frozen=True)
class Gated:
    """The deploy did not run: the agent's commits changed how the site is deployed."""
    paths: list[str]
    diff: str               # redacted, cut at DIFF_MAX_CHARS
    baseline: str | None
    head: str


DIFF_MAX_CHARS = 20_000


@dataclass(frozen=True)
class _Ran:
    """The deploy ran (or could not: `result` None when no repository is configured), or it
    waits for the founder (`result` Gated)."""
    x: _Loaded
    decision: Decision
    result: DeployResult | Gated | None


_Worked = Decision | runner.Done | _Ran


class Deploy(runner.StageCode[_Loaded, "_Worked"]):
    stage = STAGE

    def __init__(self, s: Settings) -> None:
        self.s = s

    def load(self, conn: Conn, claim: runner.Claim) -> _Loaded:
        launch = launches.latest(conn, claim.message_id)
        contract = contract_of(launch or {})
        client, repo = tenants.repo_of_message(conn, claim.message_id)
        owner, tenant_repo = tenants.repo_of_tenant(conn, contract.tenant)
        foreign = (tenant_repo or "SYNEDRE_WORKSPACE_REPO") if owner not in (None, client) and tenant_repo != repo \
            else None
        asks, approved = decisions.gate_deploy(conn, claim.message_id, launch["id"] if launch else None, self.s)
        guard = Guard(asks, approved, tenants.baseline(conn, repo))
        return _Loaded(launch, contract, topology(conn, contract.tenant), repo=repo, foreign=foreign, guard=guard)

    def work(self, claim: runner.Claim, x: _Loaded) -> _Worked:
        d = decide(claim.state["intent"], claim.state["complexity"], x.contract, x.tenant.target, x.tenant.base_url)
        if d.status != Status.DEPLOYED:
            return d
        if x.foreign:  # the launch worked in one repository: never deploy another client's
            return runner.Done(Status.ORCHESTRATION_FAILED, "tenant_repository_mismatch",
                               {**d.detail, "tenant": x.contract.tenant,
                                "launch_repo": x.repo or "SYNEDRE_WORKSPACE_REPO", "tenant_repo": x.foreign})
        try:
            result = deploy(x.repo, x.tenant, self.s, x.guard)
        except DeployError as exc:  # the contract named a target that is no tenant name
            return runner.Done(Status.ORCHESTRATION_FAILED, "no_deploy_target", {**d.detail, "error": str(exc)})
        return _Ran(x, d, result)

    def write(self, conn: Conn, claim: runner.Claim, worked: _Worked) -> runner.Done:
        if isinstance(worked, runner.Done):
            return worked
        if isinstance(worked, Decision):
            return runner.Done(worked.status, worked.event, worked.detail, _fields(worked))
        x, d, result = worked.x, worked.decision, worked.result
        assert x.launch is not None  # a deploy always follows a launch
        if isinstance(result, Gated):  # it waits for the founder: his request shows the diff of what changed
            return decisions.ask_deploy(conn, claim.message_id, x.launch["id"], _told(x, d, result))
        ok = bool(result and result.ok)
        _record_run(conn, claim.message_id, x, result, ok)
        if result is not None and result.head is not None:  # it ran: its script is the one to compare with
            tenants.set_baseline(conn, x.repo, result.head, claim.message_id)
        detail = {**d.detail, "target": x.tenant.target,
                  "exit_code": result.exit_code if result else None, "timed_out": bool(result and result.timed_out),
                  "deploy_s": round(result.duration_s, 1) if result else None}
        # a failed deploy is a failed check: the agent sees its log in the iteration
        return runner.Done(Status.DEPLOYED if ok else Status.QA_FAILED, None if ok else "deploy_failed",
                           detail, _fields(d))

    def after(self, claim: runner.Claim, worked: object, result: runner.Done | runner.Held) -> None:
        if isinstance(result, runner.Done):
            log.info(result.audit_event, message=claim.message_id, status=str(result.status),
                     target=result.detail.get("target"))


def run(message_id: int, s: Settings | None = None) -> runner.Result:
    return runner.run(Deploy(s or get_settings()), message_id)


def _fields(d: Decision) -> dict[str, Any]:
    return {"intent": d.intent, "complexity": d.complexity}


def _told(x: _Loaded, d: Decision, gated: Gated) -> dict[str, Any]:
    return {"rule": "approval_rule_touches_deploy", "why": "le script de déploiement ou l'infrastructure a changé",
            "client": x.contract.tenant, "target": x.tenant.target, "paths": gated.paths, "baseline": gated.baseline,
            "head": gated.head, "diff": gated.diff, "intent": d.intent, "complexity": d.complexity}


def deploy(repo_spec: str | None, tenant: Topology, s: Settings, guard: Guard | None = None
           ) -> DeployResult | Gated | None:
    """`./deploy` of the tenant, confined, in a fresh checkout of its repository (for a remote,
    of what this host's copy holds of it); None when no repository is configured at all.
    `Gated` instead when its script or infrastructure changed since `guard.baseline` and the
    policy asks the founder first (nothing run)."""
    repo = repos.locate(repo_spec, s, repos.CHECKOUTS)
    if repo is None:
        return None
    confine = confinement(s, tenant)
    fleet, declared = secrets.redactor(s), Redactor([v for _, v in confine.env])

    def redact(text: str) -> str:
        return declared.redact_text(fleet.redact_text(text))
    started, wait_s = time.monotonic(), s.deploy_timeout_s + repos.REMOTE_TIMEOUT_S  # another deploy of it first
    if why := preflight(confine):  # before any copy is made: nothing of the repository is touched
        log.error("deploy_sandbox_unavailable", reason=why)
        return DeployResult(ok=False, exit_code=None, timed_out=False, log_tail=redact(why), duration_s=0.0)
    try:
        owner = launcher.RunAs.lookup(s.deploy_user)
        with repos.deployable(repo, s.workspace_base_branch, s.state_dir / "deploys", owner, wait_s) as path:
            head = repos.head(path)
            if guard is not None and guard.asks and guard.approved is None:
                infra = ["deploy", *tenant.infra]
                paths = repos.changed(path, guard.baseline, infra)
                if paths:
                    diff = redact(repos.diff(path, guard.baseline, infra))
                    if len(diff) > DIFF_MAX_CHARS:
                        diff = diff[:DIFF_MAX_CHARS] + f"\n[… diff cut at {DIFF_MAX_CHARS} characters]"
                    return Gated(paths, diff, guard.baseline, head)
            result = run_deploy(path, tenant.target or "", s.deploy_timeout_s, redact, confine)
            return dataclasses.replace(result, head=head) if result.exit_code is not None else result
    except (WorkspaceError, OSError, subprocess.SubprocessError) as exc:  # the remote could not be fetched
        return DeployResult(ok=False, exit_code=None, timed_out=False, duration_s=time.monotonic() - started,
                            log_tail=redact(f"{repo.remote or repo.path}: not deployable: {exc}"))


def confinement(s: Settings, tenant: Topology) -> Confinement:
    """The deploy's sandbox for this tenant: its hosts, its variables (a missing one is absent,
    and the script says so itself), none of the fleet's files."""
    env = tuple((name, value) for name in tenant.env if (value := secret_from_env(name)) is not None)
    return Confinement(s.deploy_sandbox, s.deploy_user, tenant.hosts, env, tuple(s.fleet_files()))


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
        (message_id, launch["id"] if launch else None, launch["iteration"] if launch else 1, x.tenant.target,
         x.tenant.base_url, ok, result.exit_code if result else None,
         result.log_tail if result else "no repository configured (SYNEDRE_WORKSPACE_REPO)",
         None if ok else "failed", ok))
