"""One claimed launch, from its clone to its end (SPEC §8): the agent's workspace, its
sandbox, the CLI under a pty (resumed once after an idle stop), then the verdict, the branch
brought back and merged (only after a success), what it changed. Its end is returned as a
value (`Ended`) that the spawn stage writes, with the launch row, through the runner."""
from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synedre import agent_tools as tools, db, kv, runner, secrets
from synedre.config import Settings
from synedre.db import launches, messages, tenants
from synedre.db.launches import LaunchClaim
from synedre.db.types import Conn
from synedre.log import log
from synedre.orchestrate.contract import contract_of, read_contract
from synedre.pipeline import LaunchStatus, Status
from synedre.redact import Redactor
from synedre.spawn import agent, launcher, locks, prompt, repos, sandbox, session, workspace
from synedre.spawn.changes import Changes, of_branch
from synedre.stages.spawn.verdict import LaunchVerdict, budget_left, over_budget, succeeded


@dataclass(frozen=True)
class Ended:
    """A launch's end, for the stage's write: the result (the message's status and the launch
    row's columns), what its session cost, what it changed, the audits to write with it, and
    the clone to close once that is committed (None: kept)."""
    done: runner.Done
    spent: float | None = None
    changes: Changes | None = None
    audits: tuple[tuple[str, dict[str, Any]], ...] = ()
    clone: workspace.Workspace | None = None
    log: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchLayout:
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


def layout(s: Settings, launch_id: int, run_as: launcher.RunAs | None) -> LaunchLayout:
    base = workspace.private_dir((s.state_dir / "launches" / str(launch_id)).resolve())
    d = agent.dirs(s, str(launch_id), run_as)
    return LaunchLayout(base, d.mine, d.home, d.own("out"), agent.clones_root(s, run_as))


@dataclass(frozen=True)
class Run:
    """One claimed launch, from its workspace to its end (`Ended`)."""
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
             **audit: object) -> Ended:
        """A launch that could not start its agent: failed, with why, audited."""
        log.error(f"spawn_{reason}", message=self.claim.message_id, error=error)
        return Ended(LaunchVerdict(False, reason).done(outcome, salvage={"error": error}),
                     audits=((reason, {"error": error, **audit}),) if audit else ())

    def run(self, user: prompt.LaunchPrompt, session_id: str | None = None) -> Ended:
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
            where = layout(s, claim.launch_id, run_as)
            ws = self.open_clone(where, run_as)
            if isinstance(ws, Ended):
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
            one = Agent(self, ws, where, env, settings_file, lane, run_as, apart, user.token, secrets.redactor(s),
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

    def resume_once(self, one: Agent, outcome: launcher.RunOutcome, started: float) -> launcher.RunOutcome:
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

    def open_clone(self, where: LaunchLayout, run_as: launcher.RunAs | None) -> workspace.Workspace | Ended:
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

    def confine(self, ws: workspace.Workspace, where: LaunchLayout, run_as: launcher.RunAs | None,
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

    def conclude(self, ws: workspace.Workspace, where: LaunchLayout, outcome: launcher.RunOutcome,
                 redactor: Redactor) -> Ended:
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
        done = verdict.done(launch_outcome, exit_code=outcome.exit_code, is_error=r.is_error if r else None,
                            num_turns=r.num_turns if r else None, contract=stored, salvage=salvage)
        audits = ((str(Status.MERGE_FAILED), redactor.redact_obj({"reason": merged.reason, "branch": ws.branch,
                                                                  "commits": merged.commits})),) \
            if merged is not None and merged.failed else ()
        return Ended(done, self.spent(outcome), changed, audits,
                     clone=ws if collect_error is None else None,  # a clone whose branch did not come back is kept
                     log={"ok": verdict.ok, "reason": verdict.reason, "exit_code": outcome.exit_code,
                          "stop": outcome.stop_reason})

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
class Agent:
    """One launch's agent, ready to start: its clone, files, environment and sandbox. Each
    `start` is one CLI process, a first run or a resumed one, in the same stream."""
    launch: Run
    ws: workspace.Workspace
    where: LaunchLayout
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


def state_of(conn: Conn, message_id: int) -> dict[str, Any]:
    """The message as a launch reads it: its state, its raw message, its client's codename."""
    row = conn.execute(
        """SELECT s.*, r.mailbox, r.message_id AS message_id_header, r.envelope_from, r.subject,
                  r.dkim_pass, r.raw, c.codename AS client_codename
             FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id
             LEFT JOIN synedre.clients c ON c.id = s.client_id WHERE s.message_id = %s""",
        (message_id,)).fetchone()
    assert row is not None  # found or claimed in this transaction
    return row


def follows(conn: Conn, previous: int | None) -> tuple[str, str] | None:
    """A new request in a recap's thread continues that work: the recap's summary (the
    previous launch's contract) and its workspace, so that it works on the same branch."""
    launch = launches.latest(conn, previous) if previous else None
    if not launch or not launch["branch"]:
        return None
    c = contract_of(launch)
    summary = "\n".join(filter(None, [c.summary_md, "Commits: " + ", ".join(c.commits) if c.commits else ""]))
    return summary or "(no summary)", launch["branch"].removeprefix(workspace.BRANCH_PREFIX)
