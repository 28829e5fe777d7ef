"""Stage `spawn`: launch the coding agent once per message, observed and bounded (SPEC §8).

Guards in order: the kill switches, the message's Redis lock (a duplicate, a redelivery,
a manual call, a second worker: `spawn_skipped_lock_held`), a fleet-wide slot, then the
PostgreSQL claim, the source of truth, whose attempt number fences every later write; the
claim also counts the launches PostgreSQL says are running, so the cap holds after Redis
lost its slots while launches ran.
"""
from __future__ import annotations

import math
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from synedre import agent_tools as tools, db, incidents, kv, runner, secrets
from synedre.approvals import decisions
from synedre.config import Settings, get_settings
from synedre.db import changes as launch_changes, launches, lessons as lessons_sql, messages, tenants
from synedre.db.launches import LaunchClaim
from synedre.log import log
from synedre.message import ParsedMessage
from synedre.orchestrate import iterations, lessons
from synedre.orchestrate.contract import contract_of, read_contract
from synedre.pipeline import BY_NAME, LaunchStatus, Status
from synedre.redact import Redactor
from synedre.spawn import agent, failure, launcher, locks, persona, prompt, repos, routing, sandbox, session, workspace
from synedre.spawn.changes import Changes, of_branch

DEFAULT_AGENT = "atlas"
STAGE = BY_NAME["spawn"]
SUCCESS_STATUS, FAILED_STATUS = Status.SPAWNED, Status.SPAWN_FAILED


class NoSlot(Exception):
    """Three launches already run fleet-wide: try again later (transient)."""


@dataclass(frozen=True)
class LaunchVerdict:
    ok: bool
    reason: str
    status: Status | None = None  # the message's status when it is not spawned / spawn_failed

    @property
    def message_status(self) -> Status:
        return self.status or (SUCCESS_STATUS if self.ok else FAILED_STATUS)

    @property
    def done(self) -> runner.Done:
        return runner.Done(self.message_status, "spawn_action_done" if self.ok else str(Status.SPAWN_FAILED))


@dataclass(frozen=True)
class OverBudget:
    reason: str
    fleet: bool  # the fleet's day, not the message's own total: an incident too

    def __str__(self) -> str:
        return self.reason


def over_budget(conn, message_id: int, s: Settings) -> OverBudget | None:
    """Spending fails closed: the message's own total, then the fleet's day."""
    row = conn.execute(
        """SELECT (SELECT coalesce(sum(cost_usd), 0) FROM synedre.launches WHERE message_id = %s) AS mine,
                  (SELECT usd FROM synedre.spend_today) AS day""",  # launches and persona asks
        (message_id,)).fetchone()
    if row["mine"] >= s.max_message_cost_usd:
        return OverBudget(f"message cost {row['mine']} >= {s.max_message_cost_usd} USD", fleet=False)
    if row["day"] >= s.daily_spend_cap_usd:
        return OverBudget(f"fleet spend today {row['day']} >= {s.daily_spend_cap_usd} USD", fleet=True)
    return None


def budget_left(s: Settings, spent: float) -> float:
    """What remains of a launch's spending budget (SYNEDRE_MAX_BUDGET_USD: one for the launch and
    all its resumes, each given only the rest), down to the cent; 0 when less than a cent is left."""
    return max(0.0, math.floor((s.max_budget_usd - spent) * 100 + 1e-6) / 100)


def succeeded(outcome: launcher.RunOutcome, max_turns: int | None, contract_valid: bool,
              contract_committed: bool = False) -> LaunchVerdict:
    """SPEC §8: never trust the exit code alone. A contract file in the agent's commits is
    refused whatever it says: the launch's contract lives outside the repository, and one
    that travels with the code could pass for a later launch's."""
    r = outcome.result
    if r is None:
        return LaunchVerdict(False, outcome.stop_reason)
    if r.subtype == "success" and r.is_error:  # the CLI's API calls failed: its own words, classified
        return LaunchVerdict(False, failure.reason(r.raw))
    if r.subtype != "success" or r.is_error:
        return LaunchVerdict(False, f"result:{r.subtype}:is_error={r.is_error}")
    if r.permission_denials:
        return LaunchVerdict(False, "permission_denials")
    if max_turns is not None and (r.num_turns or 0) > max_turns:
        return LaunchVerdict(False, "turn_cap_exceeded")
    if contract_committed:
        return LaunchVerdict(False, "contract_committed")
    if not contract_valid:
        return LaunchVerdict(False, "invalid_contract")
    return LaunchVerdict(True, "success")


class LaunchStop(threading.Event):
    """One launch's stop: set by this launch alone (one of its guards lost), and seen set
    while `worker` is (the worker stopping). A lost guard must not set the worker's event:
    it stays set in that process, and every later launch there would be interrupted at once."""

    def __init__(self, worker: threading.Event | None = None) -> None:
        super().__init__()
        self.worker = worker

    def is_set(self) -> bool:
        return super().is_set() or (self.worker is not None and self.worker.is_set())


Body = Callable[[int, Settings, threading.Event], runner.Result]


def run(message_id: int, s: Settings | None = None, stop: threading.Event | None = None,
        body: Body | None = None) -> runner.Result:
    """The launch's result: Done (its verdict written), Held (paused, over budget) or Skip.
    `stop` (the worker's, shared by its launches) interrupts this launch when set. `body`:
    what runs behind the guards (a launch; `resume` passes its own)."""
    s = s or get_settings()
    r = kv.client()
    if reason := locks.spawn_disabled(r, s.spawn_disabled):
        why = f"held: launches paused ({reason})"
        hold(message_id, why)
        log.warning("spawn_disabled", message=message_id, reason=reason)
        return runner.Held(why, "spawn_held")
    lock = locks.MessageLock(r, str(message_id))
    if not lock.acquire(s.spawn_lock_ttl_s):
        with db.transaction() as conn:
            messages.audit(conn, message_id, "spawn_skipped_lock_held", holder=lock.holder())
        return runner.Skip("another worker holds the launch lock")
    slot = locks.LaunchSemaphore(r, limit=s.max_concurrent_launches, ttl_s=s.spawn_lock_ttl_s)
    beats = []
    try:
        if not slot.acquire():
            raise NoSlot(f"{s.max_concurrent_launches} launches already running")
        own = LaunchStop(stop)
        beats = [locks.Heartbeat(g, on_lost=own.set) for g in (lock, slot)]
        for b in beats:
            b.start()
        return (body or _launch)(message_id, s, own)
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
        runner.set_waiting(conn, message_id, reason, until)
        if row["waiting_reason"] != reason:
            messages.audit(conn, message_id, "spawn_held", reason=reason)


@dataclass(frozen=True)
class _Loaded:
    """What a launch reads before it claims: the message, its route, its iteration."""
    state: dict[str, Any]
    msg: ParsedMessage
    planned: routing.Planned
    iteration: int
    brief: iterations.Brief | None
    follows: tuple[str, str] | None = None  # a recap's thread: (that recap's summary, its launch's workspace)


def _launch(message_id: int, s: Settings, stop: threading.Event) -> runner.Result:
    # 1. read what the launch needs, in one short read-only transaction
    with db.transaction() as conn:
        loaded = _load(conn, message_id, s)
    if isinstance(loaded, _Capped):
        if loaded.over.fleet:  # the daily cap reached: an incident, once an hour
            incidents.safely(incidents.spend_cap(loaded.held.why, s.daily_spend_cap_usd))
        return loaded.held
    if not isinstance(loaded, _Loaded):
        return loaded
    state, msg = loaded.state, loaded.msg
    # 2. the network, with no transaction open: the embedding and the proxy's health check
    vector = persona.query_vector(f"{msg.subject}\n{msg.split.cover}")
    route = routing.check_proxy(loaded.planned, routing.http_healthy)
    # 3. the claim (the source of truth against a second launch), persona and audits
    with db.transaction() as conn:
        bundle = persona.load(conn, DEFAULT_AGENT, query="", embed=vector, chantier_id=state["chantier_id"],
                              client_id=state["client_id"])
        system = prompt.system_prompt(state["intent"], state["complexity"], persona.render(bundle))
        # Redis's slots are lost with its data; launches still running then keep their rows
        if (n := launches.running(conn)) >= s.max_concurrent_launches:
            raise NoSlot(f"{n} launches running (PostgreSQL's count)")
        # a first launch the approval policy holds waits for the founder's OK instead
        approval = decisions.gate(conn, state, system.kind, route.model, s) if loaded.iteration == 1 else None
        if not (approval is None or isinstance(approval, int)):
            return approval
        claim = runner.claim_launch(conn, message_id, iteration=loaded.iteration, agent_codename=DEFAULT_AGENT,
                                    model=route.model, model_route=route.as_dict(), system_prompt=system.kind,
                                    prompt_version=prompt.VERSION, max_turns=system.max_turns, approval_id=approval)
        if claim is None:
            return runner.why_not(conn, STAGE, message_id)
        lessons_sql.given(conn, claim.launch_id, [lesson.id for lesson in bundle.lessons])
        if bundle.lessons_error:
            messages.audit(conn, message_id, "persona_lessons_failed", error=bundle.lessons_error)
        if route.fallback_reason:
            messages.audit(conn, message_id, "model_route_fallback", reason=route.fallback_reason)
    client = f"{state['client_codename'] or 'unknown'} ({state['client_source'] or 'unknown'})"
    user = prompt.user_prompt(
        message_ref=state["message_id_header"], client=client,
        intent=state["intent"], complexity=state["complexity"], confidence=state["confidence"] or 0.0,
        rationale=state["rationale"] or "", cover=msg.split.cover, quoted=msg.split.quoted,
        iteration=loaded.brief.text if loaded.brief else None,
        attachments=msg.attachment_names, subject=msg.subject,
        previous_recap=loaded.follows[0] if loaded.follows else None, lessons=persona.lessons_text(bundle))
    return _Launch(claim, s, system, route.model, stop, loaded.follows[1] if loaded.follows else None,
                   files=loaded.brief.files if loaded.brief else ()).run(user)


@dataclass(frozen=True)
class _Capped:
    over: OverBudget
    held: runner.Held


def _load(conn, message_id: int, s: Settings) -> _Loaded | _Capped | runner.Result:
    """The message at an entry status, or why not: over budget (held), over its iteration
    budget (escalated, the one write here), not launchable."""
    state = conn.execute(
        """SELECT s.*, r.mailbox, r.message_id AS message_id_header, r.envelope_from, r.subject,
                  r.dkim_pass, r.raw, c.codename AS client_codename
             FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id
             LEFT JOIN synedre.clients c ON c.id = s.client_id
            WHERE s.message_id = %s AND s.status = ANY(%s)""",
        (message_id, [str(x) for x in STAGE.entry])).fetchone()
    if state is None:
        return runner.why_not(conn, STAGE, message_id)
    if over := over_budget(conn, message_id, s):
        messages.audit(conn, message_id, "spawn_skipped_budget", reason=over.reason)
        runner.set_waiting(conn, message_id, f"held: spending cap ({over})")
        log.warning("spawn_skipped_budget", message=message_id, reason=over.reason)
        return _Capped(over, runner.Held(f"held: spending cap ({over})", "spawn_skipped_budget"))
    msg = ParsedMessage.read(conn, state)
    planned = routing.planned_route(conn, state["client_id"], state["chantier_id"])
    if state["status"] != Status.QA_FAILED:
        return _Loaded(state, msg, planned, 1, None, _follows(conn, state["follows_message_id"]))
    plan = iterations.budget(conn, message_id, s)  # the checks failed: iterate, or escalate
    if not plan.escalate:
        return _Loaded(state, msg, planned, plan.next, iterations.brief(conn, message_id))
    escalated = runner.Done(Status.ESCALATED, detail={"launches": plan.done, "limit": plan.limit,
                                                      "only_iso_mismatch": plan.only_iso, "reasons": plan.reasons,
                                                      "learn": message_id})
    if not runner.move(conn, STAGE, message_id, escalated, at=Status.QA_FAILED):
        return runner.why_not(conn, STAGE, message_id)
    # the last failure, with its figures, becomes a lesson for the next launch (SPEC §9.8)
    lessons.note(conn, "escalation", f"escalation:{message_id}:{plan.done}", message_id,
                 lessons.escalation_facts(conn, message_id, plan.done, plan.limit), s)
    log.warning("escalated", message=message_id, iterations=plan.done, limit=plan.limit)
    return escalated


def _follows(conn, previous: int | None) -> tuple[str, str] | None:
    """A new request in a recap's thread continues that work: the recap's summary (the
    previous launch's contract) and its workspace, so that it works on the same branch."""
    launch = launches.latest(conn, previous) if previous else None
    if not launch or not launch["branch"]:
        return None
    c = contract_of(launch)
    summary = "\n".join(filter(None, [c.summary_md, "Commits: " + ", ".join(c.commits) if c.commits else ""]))
    return summary or "(no summary)", launch["branch"].removeprefix(workspace.BRANCH_PREFIX)


@dataclass(frozen=True)
class _Layout:
    """Where one launch's files live: under `<state>/agent/<id>` (spawn/agent.py) its home,
    the contract's own directory and the CLI's settings (the fleet's, readable by the agent's
    group only); the clones beside; under `<state>/launches/<id>`, private to the fleet, the
    NDJSON stream."""
    base: Path
    mine: Path
    home: Path
    out: Path
    clones: Path

    @property
    def contract(self) -> Path:
        return self.out / prompt.CONTRACT_NAME


def _layout(s: Settings, launch_id: int, run_as: launcher.RunAs | None) -> _Layout:
    base = workspace.private_dir((s.state_dir / "launches" / str(launch_id)).resolve())
    d = agent.dirs(s, str(launch_id), run_as)
    return _Layout(base, d.mine, d.home, d.own("out"), agent.clones_root(s, run_as))


@dataclass(frozen=True)
class _Launch:
    """One claimed launch, from its workspace to its verdict written."""
    claim: LaunchClaim
    s: Settings
    system: prompt.SystemChoice
    model: str
    stop: threading.Event
    continues: str | None = None  # the workspace (and so the branch) of the work this request continues
    clone: str | None = None  # resuming: the name of the launch's clone, kept from its first run
    first_seq: int = 0  # resuming: the launch's stream goes on from here
    files: tuple[tuple[str, bytes], ...] = ()  # put in the clone before the agent starts (the iteration's diff images)

    def fail(self, reason: str, error: str, outcome: LaunchStatus = LaunchStatus.FAILED,
             **audit: object) -> runner.Done:
        """A launch that could not start its agent: failed, with why, audited."""
        done = LaunchVerdict(False, reason).done
        with db.transaction() as conn:
            runner.finish_launch(conn, self.claim, done, outcome=outcome, reason=reason, salvage={"error": error})
            if audit:
                messages.audit(conn, self.claim.message_id, reason, error=error, **audit)
        log.error(f"spawn_{reason}", message=self.claim.message_id, error=error)
        return done

    def run(self, user: prompt.LaunchPrompt, session_id: str | None = None) -> runner.Done:
        """The agent, from its clone to its verdict. `session_id`: this run continues that
        session (`synedre launch resume`); a run stopped by the idle timeout goes on once in
        its session (`resume_once`)."""
        s, claim = self.s, self.claim
        lane = tools.policy(self.system.kind, tools.configured(s.agent_tools))
        try:
            run_as = agent.user(s)
        except (KeyError, ValueError) as exc:  # fail closed: the agent never runs as root by mistake
            return self.fail("agent_user_unavailable", f"SYNEDRE_AGENT_USER={s.agent_user}: {exc}")
        started = time.monotonic()
        # Private until the agent is done (see workspace.private_files); the merge comes after.
        with workspace.private_files():
            where = _layout(s, claim.launch_id, run_as)
            ws = self.open_clone(where, run_as)
            if isinstance(ws, runner.Done):
                return ws
            env = agent.env(s, f"launch:{claim.launch_id}", where.home, where.contract, run_as)
            settings_file = self.confine(ws, where, run_as, lane)
            apart = agent.apart(where.home, [where.mine, ws.path])
            if unavailable := sandbox.preflight(env["PATH"], run_as, apart):  # before any agent process or model call
                workspace.close_workspace(ws)
                return self.fail("sandbox_unavailable", unavailable, LaunchStatus.SANDBOX_UNAVAILABLE,
                                 path=env["PATH"])
            if session_id is None:  # what a resumed run's system prompt must name again
                session.keep_token(where.base, user.token)
            # the stream's redactor, then what the agent left (contract, commits)
            one = _Agent(self, ws, where, env, settings_file, lane, run_as, apart, user.token, secrets.redactor(s),
                         self.persist())
            with db.transaction() as conn:  # a resumed launch: what its earlier runs left of its budget
                budget = budget_left(s, launches.record_cost(conn, claim, None))
            outcome = self.resume_once(one, one.start(user.text, session_id, self.limits(0.0), budget), started)
        return self.conclude(ws, where, outcome, one.redactor)

    def spent(self, outcome: launcher.RunOutcome) -> float | None:
        """What the launch's session has cost so far by the CLI's account: its result's total (the
        CLI counts the session's earlier runs in), else, a run stopped before its result, the
        running total its session keeps (spawn/session.py `cost`)."""
        r = outcome.result
        if r is not None and r.total_cost_usd is not None:
            return r.total_cost_usd
        return session.cost(self.s.state_dir, self.claim.launch_id, outcome.session_id) if outcome.session_id else None

    def limits(self, spent_s: float) -> launcher.Limits:
        """The launch's limits, less what its earlier run in the same claim already took."""
        s = self.s
        return launcher.Limits(idle_timeout_s=s.idle_timeout_s, hard_timeout_s=s.hard_timeout_s - spent_s,
                               budget_s=s.launch_budget_s - spent_s)

    def resume_once(self, one: _Agent, outcome: launcher.RunOutcome, started: float) -> launcher.RunOutcome:
        """A run stopped by the idle timeout (125) goes on once in its session, in the same
        claim, row and stream (SYNEDRE_AUTO_RESUME), while the launch's time and spending
        budgets remain and launches are not paused; audited `spawn_resumed`, or
        `spawn_resume_skipped` with why not."""
        s, mid = self.s, self.claim.message_id
        if outcome.stop_reason != "idle" or not outcome.session_id or not s.auto_resume:
            return outcome
        limits = self.limits(time.monotonic() - started)
        why = "launch time budget spent" if min(limits.hard_timeout_s, limits.budget_s) <= 0 else None
        try:
            why = why or (f"launches paused ({paused})" if (paused := locks.spawn_disabled(
                kv.client(), s.spawn_disabled)) else None)
        except locks.LaunchGuardUnavailable as exc:  # fail closed: nothing says launches may go on
            why = f"launch switch unreadable: {exc}"
        spent = self.spent(outcome)  # what the stopped run cost (no result: its session's total)
        with db.transaction() as conn:
            launches.update(conn, self.claim, session_id=outcome.session_id)  # fenced: still ours
            spent = launches.record_cost(conn, self.claim, spent)
            why = why or (str(over) if (over := over_budget(conn, mid, s)) else None)
            if not why and (budget := budget_left(s, spent)) <= 0:
                why = f"launch spending budget spent: {spent:.2f} of {s.max_budget_usd:.2f} USD"
            messages.audit(conn, mid, "spawn_resume_skipped" if why else "spawn_resumed",
                           **({"reason": why} if why else {"budget_usd": budget}), attempt=self.claim.attempt,
                           launch_id=self.claim.launch_id, after="idle", by="auto", spent_usd=spent)
        if why:
            log.warning("spawn_resume_skipped", message=mid, reason=why)
            return outcome
        log.info("spawn_resumed", message=mid, launch_id=self.claim.launch_id, after="idle", budget_usd=budget)
        return one.start(session.resume_prompt("idle", str(one.where.contract)), outcome.session_id, limits, budget)

    def open_clone(self, where: _Layout, run_as: launcher.RunAs | None) -> workspace.Workspace | runner.Done:
        """The launch's own clone of its client's repository (the fleet's default for a client
        without one; an empty one when none is configured, so git still works); never the trunk."""
        s, claim = self.s, self.claim
        with db.transaction() as conn:
            spec = tenants.repo_of_message(conn, claim.message_id)[1]
        repo = repos.locate(spec, s) or repos.Repository(where.base / "scratch")
        try:
            if spec is None and s.workspace_repo is None:
                workspace.init_scratch(repo.path, s.workspace_base_branch)
            name = self.clone or self.continues or f"msg-{claim.message_id}-a{claim.attempt}"
            ws = repos.open_workspace(repo, base_branch=s.workspace_base_branch, root=where.clones,
                                      name=name, owner=run_as)
            base = repos.head(ws.repo, s.workspace_base_branch)
        except (workspace.WorkspaceError, OSError, subprocess.SubprocessError) as exc:
            return self.fail("workspace_unavailable", str(exc), repo=str(repo.remote or repo.path))
        if spec is not None or s.workspace_repo is not None:
            with db.transaction() as conn:  # before any agent commit: the deploy script as the client has it
                tenants.set_baseline(conn, spec, base, claim.message_id, first=True)
        if self.clone is None:  # absent before the agent starts: only its own counts (a resumed one's is)
            where.contract.unlink(missing_ok=True)
        workspace.private_file(where.base / "events.ndjson")
        try:
            workspace.place_files(ws, self.files)
        except (OSError, workspace.WorkspaceError) as exc:  # the brief says the difference in words too
            with db.transaction() as conn:
                messages.audit(conn, claim.message_id, "workspace_files_not_placed", error=str(exc)[:300],
                               files=[name for name, _ in self.files])
            log.warning("workspace_files_not_placed", message=claim.message_id, error=str(exc))
        return ws

    def confine(self, ws: workspace.Workspace, where: _Layout, run_as: launcher.RunAs | None,
                lane: tools.ToolPolicy) -> Path:
        """The sandbox's settings written for the CLI, and recorded on the launch's row."""
        rules = sandbox.settings(workspace=ws.path, contract_dir=where.out, launch_dir=where.mine, repo=ws.repo,
                                 fleet=self.s.fleet_files(),
                                 domains=sandbox.allowed_domains(self.s.agent_allowed_domains))
        settings_file = sandbox.write_settings(where.mine / sandbox.SETTINGS_NAME, rules, run_as)
        with db.transaction() as conn:
            launches.update(conn, self.claim, worktree=str(ws.path), branch=ws.branch,
                            ndjson_path=str(where.base / "events.ndjson"), agent_tools=lane.as_record(),
                            contract_path=str(where.contract), sandbox=rules)
        return settings_file

    def persist(self) -> Callable[[launcher.Batch], None]:
        seq = [self.first_seq]

        def persist(batch: launcher.Batch) -> None:
            with db.transaction() as conn:
                seq[0] = launches.add_events(conn, self.claim, seq[0], [
                    (e.event_type, e.subtype, e.tool_name, payload) for e, payload in batch])
        return persist

    def on_session(self, session_id: str) -> None:
        with db.transaction() as conn:
            launches.update(conn, self.claim, session_id=session_id)

    def conclude(self, ws: workspace.Workspace, where: _Layout, outcome: launcher.RunOutcome,
                 redactor: Redactor) -> runner.Done:
        """The verdict, the branch brought back and merged (only after a success), the row.
        Everything the agent wrote (its contract, its commits' subjects, the raw contract text
        of a failed run) goes through the stream's redactor before it is stored."""
        # Its processes are gone: what it left can be looked at safely (a plain file of its own).
        workspace.settle_agent_file(where.contract)
        collect_error = workspace.collect(ws)
        contract = read_contract(where.contract, "lean" if self.system.kind == "lean" else "rich")
        committed = prompt.committed_contracts(workspace.committed_paths(ws))
        verdict = succeeded(outcome, self.system.max_turns, contract.valid, contract_committed=bool(committed))
        r, launch_outcome = outcome.result, LaunchStatus.SUCCEEDED if verdict.ok else LaunchStatus.FAILED
        if r is not None and r.raw.get("startup_failure_reason") == sandbox.CLI_UNAVAILABLE:
            verdict, launch_outcome = LaunchVerdict(False, "sandbox_unavailable"), LaunchStatus.SANDBOX_UNAVAILABLE
        merged = None
        if verdict.ok:  # only a success reaches the trunk; anything else keeps its commits on its branch
            merged = repos.merge_back(ws, self.s) if collect_error is None else workspace.MergeResult(
                False, f"branch not brought back: {collect_error}", ["(still in the clone)"])
            if merged.failed:
                verdict = LaunchVerdict(False, str(Status.MERGE_FAILED), Status.MERGE_FAILED)
                launch_outcome = LaunchStatus.MERGE_FAILED
        salvage: dict[str, Any] = {"merge": merged and merged.reason, "contract_errors": contract.errors,
                                   "contract_committed": committed}
        if not verdict.ok:
            salvage |= {"commits": workspace.commits_since(ws), "branch": ws.branch,
                        "contract": workspace.read_file(where.contract),
                        "resumable": outcome.stop_reason in ("idle", "hard", "budget") and bool(outcome.session_id)}
        if collect_error:
            salvage["collect_error"] = collect_error
        if launch_outcome == LaunchStatus.SANDBOX_UNAVAILABLE and r:
            salvage["startup_errors"] = r.raw.get("errors")
        stored = redactor.redact_obj(contract.contract.model_dump()) if contract.contract else None
        salvage = redactor.redact_obj(salvage)
        # after what the agent left was redacted, so the redactor knows every value it hid there
        # (a commit's subject joins its lines: a rule alone may miss one); before the branch goes
        changed = self.changes(ws, merged, redactor)
        spent = self.spent(outcome)
        with db.transaction() as conn:
            launches.record_cost(conn, self.claim, spent)
            runner.finish_launch(conn, self.claim, verdict.done, outcome=launch_outcome, reason=verdict.reason,
                                 exit_code=outcome.exit_code, is_error=r.is_error if r else None,
                                 num_turns=r.num_turns if r else None,
                                 contract=stored, salvage=salvage)
            if changed is not None:
                launch_changes.record(conn, self.claim.launch_id, changed.as_record())
            if merged is not None and merged.failed:
                messages.audit(conn, self.claim.message_id, str(Status.MERGE_FAILED),
                               **redactor.redact_obj({"reason": merged.reason, "branch": ws.branch,
                                                      "commits": merged.commits}))
        if collect_error is None:  # a clone whose branch did not come back is kept
            workspace.close_workspace(ws)
        log.info("spawn_finished", message=self.claim.message_id, ok=verdict.ok, reason=verdict.reason,
                 exit_code=outcome.exit_code, stop=outcome.stop_reason)
        return verdict.done

    def changes(self, ws: workspace.Workspace, merged: workspace.MergeResult | None,
                redactor: Redactor) -> Changes | None:
        """What the merged branch changed, for the recap (spawn/changes.py); unreadable, the
        recap goes without it: the launch's verdict does not depend on it."""
        if merged is None or not merged.merged:
            return None
        try:
            return of_branch(ws, redactor, self.s.recap_patch_max_bytes)
        except workspace.WorkspaceError as exc:
            log.warning("launch_changes_unavailable", message=self.claim.message_id, error=str(exc))
            return None


@dataclass(frozen=True)
class _Agent:
    """One launch's agent, ready to start: its clone, files, environment and sandbox. Each
    `start` is one CLI process, a first run or a resumed one, in the same stream."""
    launch: _Launch
    ws: workspace.Workspace
    where: _Layout
    env: dict[str, str]
    settings_file: Path
    lane: tools.ToolPolicy
    run_as: launcher.RunAs | None
    apart: launcher.Apart  # its own /tmp, the same for every run of the launch
    token: str
    redactor: Redactor
    on_events: Callable[[launcher.Batch], None]

    def start(self, text: str, session_id: str | None, limits: launcher.Limits,
              budget_usd: float) -> launcher.RunOutcome:
        """Run the CLI to its end: a new session (persisted, so that it can be resumed), or
        `session_id` continued (`--resume`); the system prompt names the launch's fence token.
        `budget_usd`: what this run may spend (`--max-budget-usd`, the CLI counting this run's
        spend alone): what the launch's earlier runs left (`budget_left`)."""
        s, this = self.launch.s, self.launch
        argv = launcher.build_argv(s.claude_bin, add_dir=[self.ws.path, self.where.out], settings=self.settings_file,
                                   prompt=text, model=this.model, max_turns=this.system.max_turns,
                                   system_prompt=this.system.render(contract_path=str(self.where.contract),
                                                                    token=self.token),
                                   allowed_tools=self.lane.allowed, disallowed_tools=self.lane.disallowed,
                                   max_budget_usd=budget_usd, resume_session=session_id, persist_session=True)
        log.info("spawn_started", message=this.claim.message_id, attempt=this.claim.attempt, model=this.model,
                 budget_usd=budget_usd,
                 kind=this.system.kind, tools=",".join(self.lane.allowed), resumed=session_id is not None,
                 agent_user=self.run_as.name if self.run_as else None)
        return launcher.run(argv, cwd=self.ws.path, env=self.env, limits=limits, redactor=self.redactor,
                            on_events=self.on_events, ndjson_path=self.where.base / "events.ndjson",
                            on_session=this.on_session, stop=this.stop, umask=workspace.PRIVATE_UMASK,
                            run_as=self.run_as, apart=self.apart)


# -- resume by hand (`synedre launch resume`) -------------------------------------------------

def resumable(conn, message_id: int, s: Settings) -> dict[str, Any] | str:
    """The message's last launch when it can be resumed by hand, else why not, in words an
    operator reads: the message at `spawn_failed`, its last launch stopped by a timeout (or
    its worker lost) with its session recorded, the message's spending caps not reached."""
    state = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (message_id,)).fetchone()
    if state is None:
        return "no such message"
    row = launches.latest(conn, message_id)
    if row is None:
        return f"no launch yet (status {state['status']})"
    if state["status"] != FAILED_STATUS:
        return f"status {state['status']}: only a message whose launch failed ({FAILED_STATUS}) is resumed"
    if row["status"] != LaunchStatus.FAILED or not (row["salvage"] or {}).get("resumable") or not row["session_id"]:
        return (f"launch #{row['id']} ended {row['stop_reason']}: not resumable (only a launch stopped by a timeout"
                " or the loss of its worker, with its session recorded, is)")
    if over := over_budget(conn, message_id, s):
        return f"spending cap: {over}"
    if budget_left(s, float(row["cost_usd"] or 0)) <= 0:
        return (f"launch #{row['id']}'s spending budget is spent: {float(row['cost_usd']):.2f} of"
                f" {s.max_budget_usd:.2f} USD (SYNEDRE_MAX_BUDGET_USD, one for all its runs)")
    return row


def resume(message_id: int, launch_id: int, attempt: int, s: Settings | None = None,
           stop: threading.Event | None = None) -> runner.Result:
    """Resume the message's last launch (`launch_id`, as claimed by `attempt`) in its session,
    behind the guards of a launch (kill switch, lock, slot, the claim's count of running
    launches), claimed by `runner.claim_resume`: the same row, its stream going on."""
    return run(message_id, s, stop, body=lambda mid, s_, own: _resume(mid, s_, own, launch_id, attempt))


def _resume(message_id: int, s: Settings, stop: threading.Event, launch_id: int, attempt: int) -> runner.Result:
    with db.transaction() as conn:
        found = resumable(conn, message_id, s)
        if isinstance(found, str) or (found["id"], found["attempt"]) != (launch_id, attempt):
            why = found if isinstance(found, str) else "a later launch or resume took it"
            return runner.Skip(f"launch #{launch_id} not resumed: {why}")
        state = conn.execute(
            """SELECT s.*, r.mailbox, r.message_id AS message_id_header, r.envelope_from, r.subject,
                      r.dkim_pass, r.raw
                 FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id
                WHERE s.message_id = %s""",
            (message_id,)).fetchone()
        assert state is not None  # `resumable` found it in this transaction
        msg = ParsedMessage.read(conn, state)
    token = session.read_token((s.state_dir / "launches" / str(launch_id)).resolve())
    if token is None or not session.has_session(s.state_dir, launch_id, found["session_id"]):
        return runner.Skip(f"launch #{launch_id} not resumed: its session store is not on this host")
    vector = persona.query_vector(f"{msg.subject}\n{msg.split.cover}")  # the network, no transaction open
    with db.transaction() as conn:
        bundle = persona.load(conn, DEFAULT_AGENT, query="", embed=vector, chantier_id=state["chantier_id"],
                              client_id=state["client_id"])
        system = prompt.system_prompt(state["intent"], state["complexity"], persona.render(bundle))
        if (n := launches.running(conn)) >= s.max_concurrent_launches:
            raise NoSlot(f"{n} launches running (PostgreSQL's count)")
        claim = runner.claim_resume(conn, message_id, launch_id, attempt)
        if claim is None:
            return runner.Skip(f"launch #{launch_id} not resumed: no longer resumable")
        first_seq = launches.next_seq(conn, launch_id)
    log.info("spawn_resume_claimed", message=message_id, launch_id=launch_id, after=found["stop_reason"])
    user = prompt.LaunchPrompt(session.resume_prompt(found["stop_reason"], found["contract_path"]), token)
    return _Launch(claim, s, system, found["model"], stop, clone=found["branch"].removeprefix(workspace.BRANCH_PREFIX),
                   first_seq=first_seq).run(user, found["session_id"])
