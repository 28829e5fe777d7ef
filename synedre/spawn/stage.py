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
from synedre.spawn import locks, persona, prompt, routing, runner, tools, workspace
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


def db_coordinates(s: Settings) -> dict[str, str]:
    """Where the agent's own database role is, never a password: the embedded server's
    read-only agent role on loopback TCP, or SYNEDRE_AGENT_DATABASE_URL; nothing at all for
    an external server without one (the fleet's own role is never handed on)."""
    from synedre import db

    url = db.agent_url(s)
    if url is None:
        return {}
    u = urlsplit(url)
    host = u.hostname or dict(p.split("=", 1) for p in u.query.split("&") if "=" in p).get("host", "")
    return {k: v for k, v in {"PGHOST": host, "PGPORT": str(u.port or ""), "PGDATABASE": u.path.lstrip("/"),
                              "PGUSER": u.username or ""}.items() if v}


def agent_user(s: Settings) -> runner.RunAs | None:
    """The dedicated OS user the agent runs as: configured and the worker is root. A
    configured user that does not exist fails the launch (KeyError): never fall back to root."""
    if not s.agent_user or os.geteuid() != 0:
        return None
    return runner.RunAs.lookup(s.agent_user)


def agent_env(s: Settings, launch_id: int, home: Path, contract_path: Path | None = None,
              run_as: runner.RunAs | None = None) -> dict[str, str]:
    """What the agent gets, and nothing else: no database password, no other secret.
    The contract's path is there too, as well as in the system prompt. IS_SANDBOX only
    without a dedicated user: the CLI refuses bypassPermissions as root without it."""
    env = {**db_coordinates(s), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
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
    if s.agent_is_sandbox and run_as is None:
        env["IS_SANDBOX"] = "1"
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


def _run_agent(claim, state, s: Settings, system: prompt.SystemChoice, user: prompt.LaunchPrompt, model: str,
               stop: threading.Event) -> Result:
    base = (s.state_dir / "launches" / str(claim.launch_id)).resolve()
    lane = tools.policy(system.kind, tools.configured(s.agent_tools))
    try:
        run_as = agent_user(s)
    except (KeyError, ValueError) as exc:  # fail closed: the agent never runs as root by mistake
        with db.transaction() as conn:
            launches.finish(conn, claim, ok=False, status=FAILED_STATUS, reason="agent_user_unavailable",
                            salvage={"error": f"SYNEDRE_AGENT_USER={s.agent_user}: {exc}"})
        log.error("spawn_agent_user_unavailable", message=claim.message_id, user=s.agent_user)
        return Result(False, "agent_user_unavailable")
    # Private until the agent is done (see workspace.private_files); the merge comes after.
    with workspace.private_files():
        workspace.private_dir(base)
        if run_as is None:
            contract_path = base / prompt.CONTRACT_NAME
            home = workspace.private_dir(base / "home")
            workspace.private_dir(home / "tmp")
            clones = None
        else:
            # The agent's own: under <state>/agent, which it may traverse but not list, as
            # the state directory itself (0711); its launch dir stays root's, so nothing of
            # the path to the contract is the agent's to swap but the last directory.
            area = workspace.traversable_dir((s.state_dir / "agent").resolve())
            mine = workspace.traversable_dir(area / str(claim.launch_id))
            home = workspace.agent_dir(mine / "home", run_as)
            workspace.agent_dir(home / "tmp", run_as)
            contract_path = workspace.agent_dir(mine / "out", run_as) / prompt.CONTRACT_NAME
            clones = workspace.traversable_dir(area / "worktrees")
        repo = s.workspace_repo or base / "scratch"
        if s.workspace_repo is None:  # no repository configured: an empty one, so git still works
            workspace.init_scratch(repo, s.workspace_base_branch)
        ws = workspace.open_workspace(Path(repo), base_branch=s.workspace_base_branch,
                                      name=f"msg-{claim.message_id}-a{claim.attempt}",
                                      disabled=s.worktree_disabled, root=clones, owner=run_as)
        contract_path.unlink(missing_ok=True)  # absent before the agent starts: only its own counts
        ndjson = workspace.private_file(base / "events.ndjson")
        with db.transaction() as conn:
            launches.update(conn, claim, worktree=str(ws.path), branch=ws.branch, ndjson_path=str(ndjson),
                            agent_tools=lane.as_record(), contract_path=str(contract_path))
            if ws.fallback_reason:
                sql.audit(conn, claim.message_id, "worktree_fallback", reason=ws.fallback_reason)
        seq = [0]

        def persist(batch):
            with db.transaction() as conn:
                seq[0] = launches.add_events(conn, claim, seq[0], [
                    (e.event_type, e.subtype, e.tool_name, payload) for e, payload in batch])

        def session(session_id: str):
            with db.transaction() as conn:
                launches.update(conn, claim, session_id=session_id)

        argv = runner.build_argv(s.claude_bin, add_dir=ws.path, prompt=user.text,
                                 system_prompt=system.render(contract_path=str(contract_path), token=user.token),
                                 model=model, max_turns=system.max_turns, allowed_tools=lane.allowed,
                                 disallowed_tools=lane.disallowed, max_budget_usd=s.max_budget_usd)
        limits = runner.Limits(idle_timeout_s=s.idle_timeout_s, hard_timeout_s=s.hard_timeout_s,
                               budget_s=s.launch_budget_s)
        log.info("spawn_started", message=claim.message_id, attempt=claim.attempt, model=model, kind=system.kind,
                 tools=",".join(lane.allowed), agent_user=run_as.name if run_as else None)
        outcome = runner.run(argv, cwd=ws.path, env=agent_env(s, claim.launch_id, home, contract_path, run_as),
                             limits=limits, redactor=redactor(s), on_events=persist, ndjson_path=ndjson,
                             on_session=session, stop=stop, umask=workspace.PRIVATE_UMASK, run_as=run_as)
    collect_error = None
    if run_as is not None:  # its processes are gone: what it left can be looked at safely
        workspace.settle_agent_file(contract_path)
        collect_error = workspace.collect(ws)
    contract = read_contract(contract_path, "lean" if system.kind == "lean" else "rich")
    committed = prompt.committed_contracts(workspace.committed_paths(ws))
    verdict = succeeded(outcome, system.max_turns, contract.valid, contract_committed=bool(committed))
    # Only a success reaches the trunk; anything else keeps its commits on its branch.
    merged = workspace.merge_back(ws) if verdict.ok and ws.isolated else None
    salvage = None
    if not verdict.ok:
        salvage = {"commits": workspace.commits_since(ws), "branch": ws.branch,
                   "contract": workspace.read_file(contract_path),
                   "resumable": outcome.stop_reason in ("idle", "hard", "budget") and bool(outcome.session_id)}
    r = outcome.result
    with db.transaction() as conn:
        launches.finish(conn, claim, ok=verdict.ok, status=SUCCESS_STATUS if verdict.ok else FAILED_STATUS,
                        reason=verdict.reason, exit_code=outcome.exit_code,
                        is_error=r.is_error if r else None, num_turns=r.num_turns if r else None,
                        cost_usd=r.total_cost_usd if r else None,
                        contract=contract.contract.model_dump() if contract.contract else None,
                        salvage={**(salvage or {}), "merge": merged and merged.reason,
                                 "contract_errors": contract.errors, "contract_committed": committed,
                                 **({"collect_error": collect_error} if collect_error else {})})
    if ws.isolated and collect_error is None:  # a clone whose branch did not come back is kept
        workspace.close_workspace(ws)
    log.info("spawn_finished", message=claim.message_id, ok=verdict.ok, reason=verdict.reason,
             exit_code=outcome.exit_code, stop=outcome.stop_reason)
    return verdict
