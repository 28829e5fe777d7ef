"""The agent roster (SPEC §2) and the one-shot persona invocation (SPEC §9.8).

The roster: one function, `display_ring`, owns the family -> ring mapping; the stored
`orbite` column is shown next to it and `disagreements` lists where they drifted apart
(the original system let them). Routing by prompt domain reads the same rows.

An ask: claim, work, write. A short transaction refuses it over the daily spending cap,
loads the persona and opens the journal row (`synedre.agent_asks`: a launch row needs a
message, an ask has none); the AI facade (or a short toolless `claude -p`) answers with no
transaction open; a second short transaction records the answer, its tokens, its cost
and the events.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any, Literal

from psycopg.types.json import Jsonb

from synedre import ai, incidents
from synedre.config import Settings, get_settings
from synedre.db.types import Conn
from synedre.log import log
from synedre.pipeline import AskStatus
from synedre.spawn import persona

FAMILY_RING = {"direction": 1, "cadrage": 2, "execution": 2, "validation": 3}
FAMILIES = tuple(FAMILY_RING)
ATLAS_ORBIT = 0  # the stored column's orbit 0 is Atlas's alone (a unique index says so)
DOMAINS = ("content", "faq", "cover", "podcast", "linkedin", "reels")  # the column's CHECK
ASK_FEATURE = "agent_ask"
ASK_LEVEL: persona.Level = "metier"
# A model with no row in synedre.ai_prices is costed at this (USD per million tokens, in
# and out), a frontier model's price: an unknown price must not make an ask free.
DEFAULT_USD_PER_MTOK = (Decimal(15), Decimal(75))
# The claude -p path: a short answer, not a launch.
ASK_MAX_TURNS = 2
ASK_MAX_BUDGET_USD = 0.5
ASK_LIMITS_S = (120.0, 300.0)  # idle, hard

ASK_INSTRUCTIONS = ("Réponds en une fois, dans ta voix et depuis ton périmètre, à la question "
                    "ci-dessous. Si elle sort de ton périmètre, dis-le et nomme la famille qui "
                    "en répond. Pas d'action : tu conseilles, tu ne modifies rien.")

Via = Literal["facade", "claude"]


class RosterError(ValueError):
    """An unknown family, domain or agent."""


class AskRefused(RuntimeError):
    """The ask was not made: over the daily cap, or no AI route answered."""


def display_ring(family: str) -> int:
    """The ring an agent of `family` is drawn on: direction 1 (with Atlas), cadrage and
    execution 2, validation 3. The only place this mapping is written."""
    try:
        return FAMILY_RING[family]
    except KeyError:
        raise RosterError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})") from None


@dataclass(frozen=True)
class RosterAgent:
    codename: str
    nickname: str
    role: str
    family: str
    orbite: int
    active: bool
    prompt_domains: tuple[str, ...]

    @property
    def ring(self) -> int:
        return display_ring(self.family)

    @property
    def orbit_agrees(self) -> bool:
        """The stored orbit is the family's ring; orbit 0 is Atlas's, in direction."""
        if self.orbite == ATLAS_ORBIT:
            return self.family == "direction"
        return self.orbite == self.ring

    def as_record(self) -> dict[str, Any]:
        return {**asdict(self), "prompt_domains": list(self.prompt_domains), "ring": self.ring,
                "orbit_agrees": self.orbit_agrees}


def check_family(family: str | None) -> None:
    if family is not None:
        display_ring(family)


def check_domain(domain: str | None) -> None:
    if domain is not None and domain not in DOMAINS:
        raise RosterError(f"unknown prompt domain {domain!r} (known: {', '.join(DOMAINS)})")


def roster(conn: Conn, *, family: str | None = None, domain: str | None = None,
           active_only: bool = False) -> list[RosterAgent]:
    """The agents, by display ring then codename, filtered by family and prompt domain."""
    check_family(family)
    check_domain(domain)
    rows = conn.execute(
        """SELECT codename, nickname, role, group_name, orbite, active, prompt_domains
             FROM synedre.agents
            WHERE (%(f)s::text IS NULL OR group_name = %(f)s)
              AND (%(d)s::text IS NULL OR %(d)s = ANY(prompt_domains))
              AND (active OR NOT %(a)s)
            ORDER BY codename""", {"f": family, "d": domain, "a": active_only}).fetchall()
    agents = [RosterAgent(r["codename"], r["nickname"], r["role"], r["group_name"], r["orbite"],
                          r["active"], tuple(r["prompt_domains"])) for r in rows]
    return sorted(agents, key=lambda a: (a.orbite != ATLAS_ORBIT, a.ring, a.codename))


def disagreements(agents: list[RosterAgent]) -> list[RosterAgent]:
    return [a for a in agents if not a.orbit_agrees]


def route_domain(conn: Conn, domain: str) -> RosterAgent | None:
    """The agent a prompt of `domain` goes to: the active agent configured for it (the
    first by codename when several are)."""
    candidates = roster(conn, domain=domain, active_only=True)
    return min(candidates, key=lambda a: a.codename) if candidates else None


# --- one-shot invocation ---------------------------------------------------------------

@dataclass(frozen=True)
class AskResult:
    ask_id: int
    codename: str
    answer: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


def spent_today(conn: Conn) -> Decimal:
    row = conn.execute("SELECT usd FROM synedre.spend_today").fetchone()
    return Decimal(row["usd"]) if row else Decimal(0)


def over_cap(spent: Decimal, s: Settings) -> str | None:
    """Spending fails closed: the fleet's day, launches and asks together."""
    if spent >= Decimal(str(s.daily_spend_cap_usd)):
        return f"fleet spend today {spent} >= {s.daily_spend_cap_usd} USD"
    return None


def cost(conn: Conn, provider: str, model: str, tokens_in: int, tokens_out: int) -> Decimal:
    row = conn.execute("SELECT usd_per_mtok_in, usd_per_mtok_out FROM synedre.ai_prices"
                       " WHERE provider = %s AND model = %s", (provider, model)).fetchone()
    p_in, p_out = (row["usd_per_mtok_in"], row["usd_per_mtok_out"]) if row else DEFAULT_USD_PER_MTOK
    return ((p_in * tokens_in + p_out * tokens_out) / Decimal(1_000_000)).quantize(Decimal("0.000001"))


def ask_messages(system: str, question: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": f"{system}\n\n{ASK_INSTRUCTIONS}"},
            {"role": "user", "content": question}]


def _event(conn: Conn, ask_id: int, event_type: str, raw: dict[str, Any] | None = None, **payload: Any) -> None:
    payload = {**(raw or {}), **payload}
    conn.execute("""INSERT INTO synedre.agent_ask_events (ask_id, seq, event_type, payload)
                    SELECT %s, coalesce(max(seq), 0) + 1, %s, %s FROM synedre.agent_ask_events
                     WHERE ask_id = %s""", (ask_id, event_type, Jsonb(payload), ask_id))


@dataclass(frozen=True)
class _Answer:
    text: str | None  # None: no answer, see `failure`
    provider: str | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal | None = None  # None: priced from the tokens
    failure: str | None = None
    detail: dict[str, Any] | None = None


def _via_facade(system: str, question: str) -> _Answer:
    answer = ai.complete(ASK_FEATURE, ask_messages(system, question))
    if answer is None:
        return _Answer(None, failure=ai.last_failure())
    return _Answer(answer.text, answer.provider, answer.model, answer.input_tokens, answer.output_tokens,
                   detail={"duration_s": round(answer.duration_s, 3)})


def _via_claude(ask_id: int, system: str, question: str, s: Settings,
                tx: Callable[[], Any]) -> _Answer:
    """A short `claude -p`: a few turns, no tool at all (`--tools ""`: nothing that writes,
    nothing that runs), in an empty private directory, the launch's environment and user."""
    from synedre import secrets
    from synedre.spawn import agent, failure, launcher, routing, workspace

    try:
        run_as = agent.user(s)
    except (KeyError, ValueError) as exc:  # fail closed: never as root by mistake
        return _Answer(None, failure=f"agent user {s.agent_user!r} unavailable: {exc}")
    where = agent.dirs(s, f"ask-{ask_id}", run_as)
    cwd = where.own("work")
    env = agent.env(s, f"ask:{ask_id}", where.home, None, run_as)
    argv = launcher.build_argv(s.claude_bin, add_dir=cwd, prompt=question,
                             system_prompt=f"{system}\n\n{ASK_INSTRUCTIONS}", model=routing.DEFAULT_MODEL,
                             max_turns=ASK_MAX_TURNS, allowed_tools=[],
                             max_budget_usd=min(s.max_budget_usd, ASK_MAX_BUDGET_USD))

    def persist(batch: launcher.Batch) -> None:
        with tx() as conn:
            for event, payload in batch:
                _event(conn, ask_id, f"claude:{event.event_type}", payload)

    limits = launcher.Limits(idle_timeout_s=ASK_LIMITS_S[0], hard_timeout_s=ASK_LIMITS_S[1],
                           budget_s=ASK_LIMITS_S[1])
    outcome = launcher.run(argv, cwd=cwd, env=env, limits=limits, redactor=secrets.redactor(s),
                         on_events=persist, ndjson_path=None, umask=workspace.PRIVATE_UMASK, run_as=run_as)
    r = outcome.result
    detail = {"stop_reason": outcome.stop_reason, "exit_code": outcome.exit_code,
              "num_turns": r.num_turns if r else None, "duration_s": round(outcome.duration_s, 3)}
    if r is None or r.subtype != "success" or r.is_error or not (r.result or "").strip():
        why = f"claude: {outcome.stop_reason}" + (
            f", {failure.reason(r.raw)}" if r and r.subtype == "success" and r.is_error
            else f", result {r.subtype} is_error={r.is_error}" if r else "")
        return _Answer(None, failure=why, detail=detail)
    usage = r.usage or {}
    return _Answer(r.result, "claude", routing.DEFAULT_MODEL, int(usage.get("input_tokens") or 0),
                   int(usage.get("output_tokens") or 0),
                   Decimal(str(r.total_cost_usd)) if r.total_cost_usd is not None else None, detail=detail)


def ask(codename: str, question: str, *, via: Via = "facade", settings: Settings | None = None,
        transaction: Callable[[], Any] | None = None) -> AskResult:
    """`codename` answers `question` in its persona's voice, journalled with its cost."""
    from synedre import db

    s = settings or get_settings()
    tx = transaction or db.transaction
    if via not in ("facade", "claude"):
        raise RosterError(f"unknown path {via!r}: facade or claude")
    if not question.strip():
        raise RosterError("an empty question")
    vector = persona.query_vector(question)
    # 1. refuse over the cap, load the persona, open the journal (one short transaction)
    with tx() as conn:
        bundle = persona.load(conn, codename, query=question, embed=vector)
        system = persona.render(bundle, ASK_LEVEL)
        spent = spent_today(conn)
        row = conn.execute(
            """INSERT INTO synedre.agent_asks (agent_codename, question, via, persona_level)
               VALUES (%s, %s, %s, %s) RETURNING id""", (codename, question, via, ASK_LEVEL)).fetchone()
        assert row is not None
        ask_id = row["id"]
        _event(conn, ask_id, "ask_started", feature=ASK_FEATURE, via=via)
        _event(conn, ask_id, "persona_loaded", level=ASK_LEVEL, chars=len(system),
               lessons=len(bundle.lessons), lessons_error=bundle.lessons_error)
        refused = over_cap(spent, s)
        if refused:
            conn.execute(f"UPDATE synedre.agent_asks SET status = '{AskStatus.REFUSED}', error = %s,"
                         " ended_at = now()"
                         " WHERE id = %s", (refused, ask_id))
            _event(conn, ask_id, "ask_refused", reason=refused)
    if refused:
        log.warning("agent_ask_refused", ask=ask_id, agent=codename, reason=refused)
        incidents.safely(incidents.spend_cap(spent, s.daily_spend_cap_usd))
        raise AskRefused(refused)
    # 2. the paid call, holding no connection
    answer = _via_claude(ask_id, system, question, s, tx) if via == "claude" else _via_facade(system, question)
    # 3. the answer, its cost and the events (a second short transaction)
    with tx() as conn:
        usd = _journal(conn, ask_id, answer)
    if answer.text is None:
        log.error("agent_ask_failed", ask=ask_id, agent=codename, via=via, reason=answer.failure)
        raise AskRefused(f"no answer: {answer.failure}")
    log.info("agent_ask_done", ask=ask_id, agent=codename, via=via, provider=answer.provider,
             model=answer.model, cost_usd=str(usd))
    return AskResult(ask_id, codename, answer.text, answer.provider or "", answer.model or "",
                     answer.input_tokens, answer.output_tokens, usd)


def _journal(conn: Conn, ask_id: int, answer: _Answer) -> Decimal:
    """The ask's row ended (failed, or succeeded with its answer and cost) and its events;
    returns what it cost."""
    if answer.text is None:
        conn.execute(f"UPDATE synedre.agent_asks SET status = '{AskStatus.FAILED}', error = %s,"
                     " ended_at = now() WHERE id = %s", (answer.failure, ask_id))
        _event(conn, ask_id, "ask_failed", reason=answer.failure, **(answer.detail or {}))
        return Decimal(0)
    assert answer.provider is not None and answer.model is not None
    usd = answer.cost_usd if answer.cost_usd is not None else cost(
        conn, answer.provider, answer.model, answer.input_tokens, answer.output_tokens)
    conn.execute(
        f"""UPDATE synedre.agent_asks SET status = '{AskStatus.SUCCEEDED}', answer = %s, provider = %s,
                  model = %s, input_tokens = %s, output_tokens = %s, cost_usd = %s, ended_at = now()
            WHERE id = %s""",
        (answer.text, answer.provider, answer.model, answer.input_tokens, answer.output_tokens, usd, ask_id))
    _event(conn, ask_id, "ai_complete", provider=answer.provider, model=answer.model,
           input_tokens=answer.input_tokens, output_tokens=answer.output_tokens, **(answer.detail or {}))
    _event(conn, ask_id, "ask_done", cost_usd=str(usd))
    return usd


def recent_asks(conn: Conn, limit: int = 50) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(
        """SELECT id, agent_codename, via, status, provider, model, input_tokens, output_tokens, cost_usd,
                  started_at, ended_at, error FROM synedre.agent_asks ORDER BY id DESC LIMIT %s""", (limit,))]
