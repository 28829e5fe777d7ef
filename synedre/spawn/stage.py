"""Stage `spawn`: launch the coding agent once per message, observed and bounded (SPEC §8).

Guards in order: the kill switches, the message's Redis lock (a duplicate, a redelivery,
a manual call, a second worker: `spawn_skipped_lock_held`), a fleet-wide slot, then the
PostgreSQL claim, the source of truth, whose attempt number fences every later write.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from synedre import ai, db, kv
from synedre.config import Settings, get_settings
from synedre.db import launches, pipeline as sql
from synedre.log import log
from synedre.message import ParsedMessage
from synedre.orchestrate import iterations
from synedre.orchestrate.contract import read_contract
from synedre.pipeline import BY_NAME, Status
from synedre.spawn import locks, persona, prompt, routing, runner, sandbox, tools, workspace
from synedre.spawn.redact import Redactor

DEFAULT_AGENT = "atlas"
STAGE = BY_NAME["spawn"]
SUCCESS_STATUS, FAILED_STATUS = Status.SPAWNED, Status.SPAWN_FAILED


class NoSlot(Exception):
    """Three launches already run fleet-wide: try again later (transient)."""


@dataclass(frozen=True)
class Result:
    ok: bool
    reason: str
    status: Status | None = None  # the message's status when it is not spawned / spawn_failed

    @property
    def message_status(self) -> Status:
        return self.status or (SUCCESS_STATUS if self.ok else FAILED_STATUS)


def redactor(s: Settings) -> Redactor:
    secrets = list(s.secret_values())
    url = s.database_url or ""
    if password := urlsplit(url).password:
        secrets.append(password)
    return Redactor(secrets)


def over_budget(conn, message_id: int, s: Settings) -> str | None:
    """Spending fails closed: the message's own total, then the fleet's day."""
    row = conn.execute(
        """SELECT (SELECT coalesce(sum(cost_usd), 0) FROM synedre.launches WHERE message_id = %s) AS mine,
                  (SELECT usd FROM synedre.spend_today) AS day""",  # launches and persona asks
        (message_id,)).fetchone()
    if row["mine"] >= s.max_message_cost_usd:
        return f"message cost {row['mine']} >= {s.max_message_cost_usd} USD"
    if row["day"] >= s.daily_spend_cap_usd:
        return f"fleet spend today {row['day']} >= {s.daily_spend_cap_usd} USD"
    return None


def agent_user(s: Settings) -> runner.RunAs | None:
    """The unprivileged OS user the agent runs as when the worker is root (SPEC §8 Sandbox),
    unless SYNEDRE_AGENT_AS_ROOT opts out; None when the worker is not root (the agent is the
    worker's user, confined by the sandbox). A user that does not exist fails the launch
    (KeyError): never fall back to root."""
    if os.geteuid() != 0 or s.agent_as_root:
        return None
    return runner.RunAs.lookup(s.agent_user)


def agent_env(s: Settings, launch_id: int, home: Path, contract_path: Path | None = None,
              run_as: runner.RunAs | None = None) -> dict[str, str]:
    """What the agent gets, and nothing else: no database coordinates (the sandbox lets no
    connection through), no secret but the API key the CLI itself needs, which the sandbox
    unsets for the agent's commands. The contract's path is there too, as well as in the
    system prompt. IS_SANDBOX only as root (the opt-out): the CLI refuses bypassPermissions
    as root without it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "LANG": "C.UTF-8",
           "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "CLAUDE_CODE_TMPDIR": str(home / "tmp"), "SYNEDRE_WORKER_CONTEXT": f"launch:{launch_id}",
           "GIT_AUTHOR_NAME": "Atlas", "GIT_AUTHOR_EMAIL": "atlas@synedre.invalid",
           "GIT_COMMITTER_NAME": "Atlas", "GIT_COMMITTER_EMAIL": "atlas@synedre.invalid"}
    key, _ = s.resolve_key("anthropic")
    if key is not None:
        env["ANTHROPIC_API_KEY"] = key.get_secret_value()
    if s.anthropic_base_url:
        env["ANTHROPIC_BASE_URL"] = s.anthropic_base_url
    if run_as is None and os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # root, by the explicit opt-out: the CLI's own sandbox confines it
    if contract_path is not None:
        env["SYNEDRE_CONTRACT_PATH"] = str(contract_path)
    return env


def succeeded(outcome: runner.RunOutcome, max_turns: int | None, contract_valid: bool,
              contract_committed: bool = False) -> Result:
    """SPEC §8: never trust the exit code alone. A contract file in the agent's commits is
    refused whatever it says: the launch's contract lives outside the repository, and one
    that travels with the code could pass for a later launch's."""
    r = outcome.result
    if r is None:
        return Result(False, outcome.stop_reason)
    if r.subtype != "success" or r.is_error:
        return Result(False, f"result:{r.subtype}:is_error={r.is_error}")
    if r.permission_denials:
        return Result(False, "permission_denials")
    if max_turns is not None and (r.num_turns or 0) > max_turns:
        return Result(False, "turn_cap_exceeded")
    if contract_committed:
        return Result(False, "contract_committed")
    if not contract_valid:
        return Result(False, "invalid_contract")
    return Result(True, "success")


def run(message_id: int, s: Settings | None = None, stop: threading.Event | None = None) -> Result | Status | str:
    """The launch's verdict, or (a str) why it did not launch now."""
    s = s or get_settings()
    r = kv.client()
    if reason := locks.spawn_disabled(r, s.spawn_disabled):
        hold(message_id, f"held: launches paused ({reason})")
        log.warning("spawn_disabled", message=message_id, reason=reason)
        return f"held: launches paused ({reason})"
    lock = locks.MessageLock(r, str(message_id))
    if not lock.acquire():
        with db.transaction() as conn:
            sql.audit(conn, message_id, "spawn_skipped_lock_held", holder=lock.holder())
        return "another worker holds the launch lock"
    slot = locks.LaunchSemaphore(r, limit=s.max_concurrent_launches)
    beats = []
    try:
        if not slot.acquire():
            raise NoSlot(f"{s.max_concurrent_launches} launches already running")
        stop = stop or threading.Event()
        beats = [locks.Heartbeat(g, on_lost=stop.set) for g in (lock, slot)]
        for b in beats:
            b.start()
        result = _launch(message_id, s, stop)
        if isinstance(result, str) and result.startswith("held: spending cap (fleet spend today"):
            from synedre import incidents  # the daily cap reached: an incident, once an hour

            incidents.safely(incidents.spend_cap(result, s.daily_spend_cap_usd))
        return result
    finally:
        for b in beats:
            b.stop()
        for guard in (slot, lock):  # each on its own: one failing must not keep the other
            try:
                guard.release()
            except locks.LaunchGuardUnavailable as exc:
                log.warning("spawn_release_failed", message=message_id, error=str(exc))


def hold(message_id: int, reason: str, until: datetime | None = None) -> None:
    """Say why a launchable message waits (paused, no slot); audited once per reason."""
    with db.transaction() as conn:
        row = conn.execute("SELECT status, waiting_reason FROM synedre.email_states WHERE message_id = %s",
                           (message_id,)).fetchone()
        if row is None or row["status"] not in STAGE.entry:
            return
        sql.set_waiting(conn, message_id, reason, until)
        if row["waiting_reason"] != reason:
            sql.audit(conn, message_id, "spawn_held", reason=reason)


def _launch(message_id: int, s: Settings, stop: threading.Event) -> Result | Status | str:
    # 1. read what the launch needs, in one short read-only transaction
    with db.transaction() as conn:
        state = conn.execute(
            """SELECT s.*, r.mailbox, r.message_id AS message_id_header, r.envelope_from, r.subject,
                      r.dkim_pass, r.raw, c.codename AS client_codename
                 FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id
                 LEFT JOIN synedre.clients c ON c.id = s.client_id
                WHERE s.message_id = %s AND s.status = ANY(%s)""",
            (message_id, [str(x) for x in STAGE.entry])).fetchone()
        if state is None:
            return sql.why_not(conn, STAGE, message_id)
        if reason := over_budget(conn, message_id, s):
            sql.audit(conn, message_id, "spawn_skipped_budget", reason=reason)
            sql.set_waiting(conn, message_id, f"held: spending cap ({reason})")
            log.warning("spawn_skipped_budget", message=message_id, reason=reason)
            return f"held: spending cap ({reason})"
        msg = ParsedMessage.from_claim(state, sql.attachments(conn, message_id))
        planned = routing.plan(conn, state["client_id"], state["chantier_id"])
        iteration, brief = 1, None
        if state["status"] == Status.QA_FAILED:  # the checks failed: iterate, or escalate
            plan = iterations.plan(conn, message_id, s)
            if plan.escalate:
                iterations.escalate(conn, message_id, plan)
                log.warning("escalated", message=message_id, iterations=plan.done, limit=plan.limit)
                return Status.ESCALATED
            iteration, brief = plan.next, iterations.brief(conn, message_id)
    # 2. the network, with no transaction open: the embedding and the proxy's health check
    vector = _embed(f"{msg.subject}\n{msg.split.cover}"[:2000])
    route = routing.check_proxy(planned, routing.http_healthy)
    # 3. the claim (the source of truth against a second launch), persona and audits
    with db.transaction() as conn:
        bundle = persona.load(conn, DEFAULT_AGENT, query="", embed=vector,
                              chantier_id=state["chantier_id"])
        system = prompt.system_prompt(state["intent"], state["complexity"], persona.render(bundle))
        claim = launches.claim(conn, message_id, iteration=iteration, agent_codename=DEFAULT_AGENT,
                               model=route.model, model_route=route.as_dict(), system_prompt=system.kind,
                               max_turns=system.max_turns)
        if claim is None:
            return sql.why_not(conn, STAGE, message_id)
        if bundle.lessons_error:
            sql.audit(conn, message_id, "persona_lessons_failed", error=bundle.lessons_error)
        if route.fallback_reason:
            sql.audit(conn, message_id, "model_route_fallback", reason=route.fallback_reason)
    client = f"{state['client_codename'] or 'unknown'} ({state['client_source'] or 'unknown'})"
    user = prompt.user_prompt(
        message_ref=state["message_id_header"], client=client,
        intent=state["intent"], complexity=state["complexity"], confidence=state["confidence"] or 0.0,
        rationale=state["rationale"] or "", cover=msg.split.cover, quoted=msg.split.quoted, iteration=brief,
        attachments=msg.attachment_names, subject=msg.subject)
    return _run_agent(claim, state, s, system, user, route.model, stop)


def _embed(text: str) -> persona.Embed:
    """The query's vector, computed now; persona.load then only reads it back."""
    e = ai.embed("lessons_embedding", [text])
    failure = ai.last_failure() or "no embedding"

    def cached(_query: str) -> persona.Vector | None:
        if e is None:
            raise RuntimeError(failure)
        return persona.Vector(e.vectors[0], f"{e.provider}/{e.model}")
    return cached


@dataclass(frozen=True)
class _Layout:
    """Where one launch's files live. Under `<state>/agent` (root's, which the agent user may
    traverse but not list, as the state directory itself): its home, the contract's own
    directory, the CLI's settings (the fleet's, readable by the agent's group only), and the
    clones; under `<state>/launches/<id>`, private to the fleet: the NDJSON stream."""
    base: Path
    mine: Path
    home: Path
    out: Path
    clones: Path

    @property
    def contract(self) -> Path:
        return self.out / prompt.CONTRACT_NAME


def _layout(s: Settings, launch_id: int, run_as: runner.RunAs | None) -> _Layout:
    base = workspace.private_dir((s.state_dir / "launches" / str(launch_id)).resolve())
    area = (s.state_dir / "agent").resolve()
    if run_as is None:
        mine = workspace.private_dir(area / str(launch_id))
        home, out = workspace.private_dir(mine / "home"), workspace.private_dir(mine / "out")
        workspace.private_dir(home / "tmp")
        return _Layout(base, mine, home, out, workspace.private_dir(area / "clones"))
    mine = workspace.traversable_dir(workspace.traversable_dir(area) / str(launch_id))
    home, out = workspace.agent_dir(mine / "home", run_as), workspace.agent_dir(mine / "out", run_as)
    workspace.agent_dir(home / "tmp", run_as)
    return _Layout(base, mine, home, out, workspace.traversable_dir(area / "clones"))


def _fail(claim, reason: str, error: str, outcome: str | None = None, **audit: object) -> Result:
    """A launch that could not start its agent: failed, with why, audited."""
    with db.transaction() as conn:
        launches.finish(conn, claim, ok=False, status=FAILED_STATUS, reason=reason, outcome=outcome,
                        salvage={"error": error})
        if audit:
            sql.audit(conn, claim.message_id, reason, error=error, **audit)
    log.error(f"spawn_{reason}", message=claim.message_id, error=error)
    return Result(False, reason)


def _run_agent(claim, state, s: Settings, system: prompt.SystemChoice, user: prompt.LaunchPrompt, model: str,
               stop: threading.Event) -> Result:
    lane = tools.policy(system.kind, tools.configured(s.agent_tools))
    try:
        run_as = agent_user(s)
    except (KeyError, ValueError) as exc:  # fail closed: the agent never runs as root by mistake
        return _fail(claim, "agent_user_unavailable", f"SYNEDRE_AGENT_USER={s.agent_user}: {exc}")
    # Private until the agent is done (see workspace.private_files); the merge comes after.
    with workspace.private_files():
        where = _layout(s, claim.launch_id, run_as)
        repo = s.workspace_repo or where.base / "scratch"
        try:
            if s.workspace_repo is None:  # no repository configured: an empty one, so git still works
                workspace.init_scratch(repo, s.workspace_base_branch)
            ws = workspace.open_workspace(Path(repo), base_branch=s.workspace_base_branch, root=where.clones,
                                          name=f"msg-{claim.message_id}-a{claim.attempt}", owner=run_as)
        except (workspace.WorkspaceError, OSError) as exc:  # never the trunk instead
            return _fail(claim, "workspace_unavailable", str(exc), repo=str(repo))
        where.contract.unlink(missing_ok=True)  # absent before the agent starts: only its own counts
        ndjson = workspace.private_file(where.base / "events.ndjson")
        env = agent_env(s, claim.launch_id, where.home, where.contract, run_as)
        rules = sandbox.settings(workspace=ws.path, contract_dir=where.out, launch_dir=where.mine, repo=ws.repo,
                                 state_dir=s.state_dir, domains=sandbox.allowed_domains(s.agent_allowed_domains))
        settings_file = sandbox.write_settings(where.mine / sandbox.SETTINGS_NAME, rules, run_as)
        with db.transaction() as conn:
            launches.update(conn, claim, worktree=str(ws.path), branch=ws.branch, ndjson_path=str(ndjson),
                            agent_tools=lane.as_record(), contract_path=str(where.contract), sandbox=rules)
        if unavailable := sandbox.preflight(env["PATH"], run_as):  # before any agent process or model call
            workspace.close_workspace(ws)
            return _fail(claim, "sandbox_unavailable", unavailable, outcome="sandbox_unavailable", path=env["PATH"])
        argv = runner.build_argv(s.claude_bin, add_dir=[ws.path, where.out], settings=settings_file,
                                 prompt=user.text, model=model, max_turns=system.max_turns,
                                 system_prompt=system.render(contract_path=str(where.contract), token=user.token),
                                 allowed_tools=lane.allowed, disallowed_tools=lane.disallowed,
                                 max_budget_usd=s.max_budget_usd)
        log.info("spawn_started", message=claim.message_id, attempt=claim.attempt, model=model, kind=system.kind,
                 tools=",".join(lane.allowed), agent_user=run_as.name if run_as else None)
        outcome = runner.run(argv, cwd=ws.path, env=env, limits=runner.Limits(
            idle_timeout_s=s.idle_timeout_s, hard_timeout_s=s.hard_timeout_s, budget_s=s.launch_budget_s),
            redactor=redactor(s), on_events=_persist(claim), ndjson_path=ndjson, on_session=_on_session(claim),
            stop=stop, umask=workspace.PRIVATE_UMASK, run_as=run_as)
    return _conclude(claim, s, system, ws, where, outcome)


def _persist(claim):
    seq = [0]

    def persist(batch):
        with db.transaction() as conn:
            seq[0] = launches.add_events(conn, claim, seq[0], [
                (e.event_type, e.subtype, e.tool_name, payload) for e, payload in batch])
    return persist


def _on_session(claim):
    def session(session_id: str):
        with db.transaction() as conn:
            launches.update(conn, claim, session_id=session_id)
    return session


def _conclude(claim, s: Settings, system: prompt.SystemChoice, ws: workspace.Workspace, where: _Layout,
              outcome: runner.RunOutcome) -> Result:
    """The verdict, the branch brought back and merged (only after a success), the row."""
    # Its processes are gone: what it left can be looked at safely (a plain file of its own).
    workspace.settle_agent_file(where.contract)
    collect_error = workspace.collect(ws)
    contract = read_contract(where.contract, "lean" if system.kind == "lean" else "rich")
    committed = prompt.committed_contracts(workspace.committed_paths(ws))
    verdict = succeeded(outcome, system.max_turns, contract.valid, contract_committed=bool(committed))
    r, launch_outcome = outcome.result, None
    if r is not None and r.raw.get("startup_failure_reason") == sandbox.CLI_UNAVAILABLE:
        verdict, launch_outcome = Result(False, "sandbox_unavailable"), "sandbox_unavailable"
    merged = None
    if verdict.ok:  # only a success reaches the trunk; anything else keeps its commits on its branch
        merged = workspace.merge_back(ws) if collect_error is None else workspace.MergeResult(
            False, f"branch not brought back: {collect_error}", ["(still in the clone)"])
        if merged.failed:
            verdict = Result(False, "merge_failed", Status.MERGE_FAILED)
            launch_outcome = "merge_failed"
    salvage = None
    if not verdict.ok:
        salvage = {"commits": workspace.commits_since(ws), "branch": ws.branch,
                   "contract": workspace.read_file(where.contract),
                   "resumable": outcome.stop_reason in ("idle", "hard", "budget") and bool(outcome.session_id)}
    with db.transaction() as conn:
        launches.finish(conn, claim, ok=verdict.ok, status=verdict.message_status, reason=verdict.reason,
                        outcome=launch_outcome, exit_code=outcome.exit_code,
                        is_error=r.is_error if r else None, num_turns=r.num_turns if r else None,
                        cost_usd=r.total_cost_usd if r else None,
                        contract=contract.contract.model_dump() if contract.contract else None,
                        salvage={**(salvage or {}), "merge": merged and merged.reason,
                                 "contract_errors": contract.errors, "contract_committed": committed,
                                 **({"collect_error": collect_error} if collect_error else {}),
                                 **({"startup_errors": r.raw.get("errors")} if launch_outcome == "sandbox_unavailable"
                                    and r else {})})
        if merged is not None and merged.failed:
            sql.audit(conn, claim.message_id, "merge_failed", reason=merged.reason, branch=ws.branch,
                      commits=merged.commits)
    if collect_error is None:  # a clone whose branch did not come back is kept
        workspace.close_workspace(ws)
    log.info("spawn_finished", message=claim.message_id, ok=verdict.ok, reason=verdict.reason,
             exit_code=outcome.exit_code, stop=outcome.stop_reason)
    return verdict
