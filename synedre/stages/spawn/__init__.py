"""Stage `spawn`: launch the coding agent once per message, observed and bounded (SPEC §8).

Three stage objects, each called by the runner as every stage is (load, work, write):

- `Admit` works on the message where it waits (`materialized`, `qa_failed`), unclaimed:
  launches paused or a spending cap reached → it waits (`Held`); past its iteration budget →
  `escalated`, the last failure a lesson; a first launch the approval policy holds →
  `awaiting_approval`, its request opened. Otherwise it writes nothing: `ADMITTED`.
- `Launch`, behind the guards (guards.py: the message's Redis lock, a fleet-wide slot), is
  claimed by the runner's launch door (a new attempt and the launch row, which fence every
  later write; the claim counts the launches PostgreSQL says run, so the cap holds after
  Redis lost its slots); its work is the launch itself (launch.py), its write the end.
- `Resume`: the same for the message's last launch stopped resumable (`synedre launch
  resume`), claimed by the runner's resume door: the same row, its stream going on.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from synedre import db, incidents, runner
from synedre.approvals import decisions
from synedre.config import Settings, get_settings
from synedre.db import changes as launch_changes, launches, lessons as lessons_sql, messages
from synedre.db.types import Conn
from synedre.log import log
from synedre.message import ParsedMessage
from synedre.orchestrate import iterations, lessons
from synedre.pipeline import BY_NAME, Status
from synedre.spawn import persona, prompt, routing, session, workspace
from synedre.stages.spawn import guards, launch
from synedre.stages.spawn.guards import NoSlot
from synedre.stages.spawn.launch import Ended, Run
from synedre.stages.spawn.verdict import OverBudget, over_budget, resumable

DEFAULT_AGENT = "atlas"
STAGE = BY_NAME["spawn"]
ADMITTED = runner.Skip("launchable: to the launch's guards and claim")
__all__ = ["ADMITTED", "NoSlot", "resumable", "resume", "run"]


def run(message_id: int, s: Settings | None = None, stop: threading.Event | None = None) -> runner.Result:
    """The launch's result: Done (its end written), Held (waiting) or Skip. `stop` (the
    worker's, shared by its launches) interrupts this launch when set."""
    s = s or get_settings()
    admitted = runner.run(Admit(s), message_id)
    if admitted != ADMITTED:
        return admitted
    with guards.guarded(message_id, s, stop) as own:
        return runner.run(Launch(s, own), message_id) if own else runner.Skip("another worker holds the launch lock")


def resume(message_id: int, launch_id: int, attempt: int, s: Settings | None = None,
           stop: threading.Event | None = None) -> runner.Result:
    """Resume the message's last launch (`launch_id`, as claimed by `attempt`) in its session,
    behind the guards of a launch."""
    s = s or get_settings()
    if why := guards.paused(s):
        log.warning("spawn_disabled", message=message_id, reason=why)
        return runner.Held(f"held: launches paused ({why})", "spawn_held")
    with db.transaction() as conn:
        found = resumable(conn, message_id, s)
    if isinstance(found, str) or (found["id"], found["attempt"]) != (launch_id, attempt):
        return runner.Skip(f"launch #{launch_id} not resumed: "
                           f"{found if isinstance(found, str) else 'a later launch or resume took it'}")
    token = session.read_token((s.state_dir / "launches" / str(launch_id)).resolve())
    if token is None or not session.has_session(s.state_dir, launch_id, found["session_id"]):
        return runner.Skip(f"launch #{launch_id} not resumed: its session store is not on this host")
    with guards.guarded(message_id, s, stop) as own:
        if own is None:
            return runner.Skip("another worker holds the launch lock")
        return runner.run(Resume(s, own, found, token), message_id)


@dataclass(frozen=True)
class _Waiting:
    state: dict[str, Any]
    over: OverBudget | None
    plan: iterations.Budget | None  # from qa_failed: the iteration budget
    asked: dict[str, Any] | None  # a first launch the policy holds: what the founder is asked


class Admit(runner.StageCode[_Waiting, "tuple[_Waiting, str | None]"]):
    stage = STAGE
    door: ClassVar[str] = "look"

    def __init__(self, s: Settings) -> None:
        self.s = s

    def load(self, conn: Conn, found: runner.Claim) -> _Waiting:
        state, mid, s = launch.state_of(conn, found.message_id), found.message_id, self.s
        if over := over_budget(conn, mid, s):
            return _Waiting(state, over, None, None)
        if state["status"] == Status.QA_FAILED:
            return _Waiting(state, None, iterations.budget(conn, mid, s), None)
        kind = prompt.system_prompt(state["intent"], state["complexity"], "").kind
        model = routing.planned_route(conn, state["client_id"], state["chantier_id"]).route.model
        return _Waiting(state, None, None, decisions.asks(conn, state, kind, model, s))

    def work(self, found: runner.Claim, w: _Waiting) -> tuple[_Waiting, str | None]:
        return w, guards.paused(self.s)  # the kill switches, read with no transaction open

    def write(self, conn: Conn, found: runner.Claim, worked: tuple[_Waiting, str | None]) -> runner.Result:
        w, paused = worked
        mid = found.message_id
        if paused:
            return runner.Held(f"held: launches paused ({paused})", "spawn_held")
        if w.over:
            return runner.Held(f"held: spending cap ({w.over})", "spawn_skipped_budget")
        if w.plan is not None and w.plan.escalate:  # the last failure, with its figures, a lesson (SPEC §9.8)
            lessons.note(conn, "escalation", f"escalation:{mid}:{w.plan.done}", mid,
                         lessons.escalation_facts(conn, mid, w.plan.done, w.plan.limit), self.s)
            return runner.Done(Status.ESCALATED, detail={"launches": w.plan.done, "limit": w.plan.limit,
                                                         "only_iso_mismatch": w.plan.only_iso,
                                                         "reasons": w.plan.reasons, "learn": mid})
        if w.asked is not None:
            return decisions.ask_launch(conn, mid, w.asked)
        return ADMITTED

    def after(self, found: runner.Claim, worked: object, result: runner.Done | runner.Held) -> None:
        if isinstance(result, runner.Held):
            log.warning("spawn_disabled" if result.event == "spawn_held" else result.event, message=found.message_id,
                        reason=result.why)
            if result.event == "spawn_skipped_budget" and "fleet spend today" in result.why:  # an incident, hourly
                incidents.safely(incidents.spend_cap(result.why, self.s.daily_spend_cap_usd))
        elif result.status == Status.ESCALATED:
            log.warning("escalated", message=found.message_id, iterations=result.detail["launches"],
                        limit=result.detail["limit"])


class _Runs(runner.StageCode[Any, Ended]):
    """What a launch and a resume share: the end written, the clone closed after it."""
    stage = STAGE

    def __init__(self, s: Settings, stop: threading.Event) -> None:
        self.s, self.stop = s, stop

    def check_slots(self, conn: Conn) -> None:
        # Redis's slots are lost with its data; launches still running then keep their rows.
        # The claim (this one included) is counted under the claims' lock: a later one sees it.
        if (n := launches.running(conn)) > self.s.max_concurrent_launches:
            raise NoSlot(f"{n - 1} launches running (PostgreSQL's count)")

    def system(self, conn: Conn, state: dict[str, Any], vector: Any) -> tuple[prompt.SystemChoice, persona.Persona]:
        bundle = persona.load(conn, DEFAULT_AGENT, query="", embed=vector, chantier_id=state["chantier_id"],
                              client_id=state["client_id"])
        return prompt.system_prompt(state["intent"], state["complexity"], persona.render(bundle)), bundle

    def write(self, conn: Conn, claim: runner.Claim, ended: Ended) -> runner.Done:
        assert claim.launch is not None
        launches.record_cost(conn, claim.launch, ended.spent)
        if ended.changes is not None:
            launch_changes.record(conn, claim.launch.launch_id, ended.changes.as_record())
        for event, detail in ended.audits:
            messages.audit(conn, claim.message_id, event, **detail)
        return ended.done

    def after(self, claim: runner.Claim, ended: Ended, result: runner.Done | runner.Held) -> None:
        if ended.clone is not None:
            workspace.close_workspace(ended.clone)
        log.info("spawn_finished", message=claim.message_id, **ended.log)


@dataclass(frozen=True)
class _Loaded:
    state: dict[str, Any]
    msg: ParsedMessage
    planned: routing.Planned
    brief: iterations.Brief | None
    follows: tuple[str, str] | None  # a recap's thread: (that recap's summary, its launch's workspace)


class Launch(_Runs):
    door: ClassVar[str] = "launch"

    def load(self, conn: Conn, claim: runner.Claim) -> _Loaded:
        assert claim.launch is not None
        self.check_slots(conn)
        state, mid = launch.state_of(conn, claim.message_id), claim.message_id
        iteration = launches.latest(conn, mid)["iteration"]  # type: ignore[index]  # the row just claimed
        launches.update(conn, claim.launch, agent_codename=DEFAULT_AGENT, prompt_version=prompt.VERSION,
                        approval_id=decisions.approved(conn, mid) if iteration == 1 else None)
        return _Loaded(state, ParsedMessage.read(conn, state),
                       routing.planned_route(conn, state["client_id"], state["chantier_id"]),
                       iterations.brief(conn, mid, before=claim.launch.attempt) if iteration > 1 else None,
                       launch.follows(conn, state["follows_message_id"]) if iteration == 1 else None)

    def work(self, claim: runner.Claim, x: _Loaded) -> Ended:
        assert claim.launch is not None
        state, msg = x.state, x.msg
        # the network, with no transaction open: the embedding and the proxy's health check
        vector = persona.query_vector(f"{msg.subject}\n{msg.split.cover}")
        route = routing.check_proxy(x.planned, routing.http_healthy)
        with db.transaction() as conn:
            system, bundle = self.system(conn, state, vector)
            launches.update(conn, claim.launch, model=route.model, model_route=route.as_dict(),
                            system_prompt=system.kind, max_turns=system.max_turns)
            lessons_sql.given(conn, claim.launch.launch_id, [lesson.id for lesson in bundle.lessons])
            if bundle.lessons_error:
                messages.audit(conn, claim.message_id, "persona_lessons_failed", error=bundle.lessons_error)
            if route.fallback_reason:
                messages.audit(conn, claim.message_id, "model_route_fallback", reason=route.fallback_reason)
        client = f"{state['client_codename'] or 'unknown'} ({state['client_source'] or 'unknown'})"
        user = prompt.user_prompt(
            message_ref=state["message_id_header"], client=client,
            intent=state["intent"], complexity=state["complexity"], confidence=state["confidence"] or 0.0,
            rationale=state["rationale"] or "", cover=msg.split.cover, quoted=msg.split.quoted,
            iteration=x.brief.text if x.brief else None, attachments=msg.attachment_names, subject=msg.subject,
            previous_recap=x.follows[0] if x.follows else None, lessons=persona.lessons_text(bundle))
        return Run(claim.launch, self.s, system, route.model, self.stop, x.follows[1] if x.follows else None,
                   files=x.brief.files if x.brief else ()).run(user)


class Resume(_Runs):
    door: ClassVar[str] = "resume"

    def __init__(self, s: Settings, stop: threading.Event, found: dict[str, Any], token: str) -> None:
        super().__init__(s, stop)
        self.found, self.token = found, token
        self.resumes = (found["id"], found["attempt"])

    def load(self, conn: Conn, claim: runner.Claim) -> tuple[ParsedMessage, int]:
        self.check_slots(conn)
        assert claim.launch is not None
        return ParsedMessage.read(conn, claim.state), launches.next_seq(conn, claim.launch.launch_id)

    def work(self, claim: runner.Claim, loaded: tuple[ParsedMessage, int]) -> Ended:
        assert claim.launch is not None
        (msg, first_seq), found = loaded, self.found
        vector = persona.query_vector(f"{msg.subject}\n{msg.split.cover}")  # the network, no transaction open
        with db.transaction() as conn:
            system, _ = self.system(conn, claim.state, vector)
        log.info("spawn_resume_claimed", message=claim.message_id, launch_id=found["id"], after=found["stop_reason"])
        user = prompt.LaunchPrompt(session.resume_prompt(found["stop_reason"], found["contract_path"]), self.token)
        return Run(claim.launch, self.s, system, found["model"], self.stop,
                   clone=found["branch"].removeprefix(workspace.BRANCH_PREFIX),
                   first_seq=first_seq).run(user, found["session_id"])
