"""Requests for the founder's OK and the decisions that consume them, once (SPEC §13).

The gate (before a first launch's claim): an approved request lets the launch go and is
recorded on it; a policy rule that matches opens a request and moves the message to
`awaiting_approval` in the same transaction. A decision — the founder's reply, or an
operator's command — is a conditional UPDATE of the open, unexpired request: exactly one
wins, whatever the number of copies processed at once, and it moves the message on in the
same transaction (`materialized` for OK, `refused` for NON).

A reply is a decision only when every check holds (`judge`): envelope and header From are
the founder's, DKIM passes (aligned, whole body), the thread names the request, the token
is in the reply, and the verdict is in the reply's own text (its cover), never the quote.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from email import message_from_bytes, policy as email_policy
from email.utils import getaddresses
from typing import Any

from psycopg.types.json import Jsonb

from synedre import agent_tools as tools, runner
from synedre.approvals import policy
from synedre.config import Settings
from synedre.db import messages
from synedre.db.types import Conn
from synedre.mail.compose import message_ids
from synedre.orchestrate import lessons
from synedre.pipeline import BY_NAME, ApprovalStatus, Status, consumer_of

APPROVAL, SPAWN, DEPLOY = BY_NAME["approval"], BY_NAME["spawn"], BY_NAME["deploy"]
REQUEST_KIND, EXPIRED_KIND, RECAP_KIND = "approval", "approval-expired", "recap"
# A request's gate: before a first launch, or before the deploy of a launch whose commits
# changed how the site is deployed; an OK moves the message back to that gate's stage.
LAUNCH_GATE, DEPLOY_GATE = "launch", "deploy"
RELEASED_TO = {LAUNCH_GATE: Status.MATERIALIZED, DEPLOY_GATE: Status.SPAWNED}
# The verdict opens the reply's own text: OK (or oui) releases, NON refuses; what follows is his note.
_OK = re.compile(r"^[\s\W_]*(?:ok|oui)\b[\s\W_]*", re.I)
_NON = re.compile(r"^[\s\W_]*non\b[\s\W_]*", re.I)
NOTE_MAX_CHARS = 2000


@dataclass(frozen=True)
class Thread:
    """The mail of ours a reply answers: which message it was about, which kind."""
    message_id: int
    kind: str
    token: str | None = None  # an approval request's
    approval_id: int | None = None  # an approval request's: the one his reply decides
    client_id: int | None = None  # the client of the message it was about


def request_kind(gate: str, launch_id: int | None) -> str:
    """The outbound mail kind of a request (one mail each: a deploy's per launch)."""
    return REQUEST_KIND if gate == LAUNCH_GATE else f"{REQUEST_KIND}-deploy-{launch_id}"


def is_request(kind: str) -> bool:
    return kind == REQUEST_KIND or kind.startswith(f"{REQUEST_KIND}-deploy-")


@dataclass(frozen=True)
class Judgement:
    """What a reply to one of our mails is: a decision (`verdict` ok|non), or why not."""
    verdict: str | None
    note: str | None
    why_not: str | None


def verdict_of(cover: str) -> tuple[str | None, str | None]:
    """(ok | non | None, the note after it) from the reply's own text."""
    for name, pattern in (("ok", _OK), ("non", _NON)):
        if m := pattern.match(cover):
            return name, cover[m.end():].strip()[:NOTE_MAX_CHARS] or None
    return None, None


def _header_from(raw: bytes) -> list[str]:
    msg = message_from_bytes(raw, policy=email_policy.compat32)
    return [a.lower() for _, a in getaddresses(msg.get_all("From") or []) if "@" in a]


def replied_ids(raw: bytes) -> list[str]:
    """The ids a reply names, its In-Reply-To first, then its References from the last."""
    msg = message_from_bytes(raw, policy=email_policy.compat32)
    return list(dict.fromkeys(message_ids(msg.get("In-Reply-To")) + message_ids(msg.get("References"))[::-1]))


def thread_of(conn: Conn, raw: bytes) -> Thread | None:
    """The approval request or recap of ours this message replies to, if any."""
    ids = replied_ids(raw)
    if not ids:
        return None
    rows = conn.execute(
        """SELECT o.message_id, o.kind, o.rfc_message_id, a.token, a.id AS approval_id, s.client_id
             FROM synedre.outbound_mail o
             LEFT JOIN synedre.email_states s ON s.message_id = o.message_id
             LEFT JOIN synedre.approvals a ON a.message_id = o.message_id
                   AND o.kind = CASE a.gate WHEN 'launch' THEN %(req)s ELSE %(req)s || '-deploy-' || a.launch_id END
            WHERE o.rfc_message_id = ANY(%(ids)s) AND (o.kind IN (%(req)s, %(recap)s) OR o.kind LIKE %(deploy)s)""",
        {"req": REQUEST_KIND, "ids": ids, "recap": RECAP_KIND, "deploy": f"{REQUEST_KIND}-deploy-%"}).fetchall()
    by_id = {r["rfc_message_id"]: r for r in rows}
    r = next((by_id[i] for i in ids if i in by_id), None)
    return Thread(r["message_id"], r["kind"], r["token"], r["approval_id"], r["client_id"]) if r else None


def not_the_founders(*, raw: bytes, sender: str | None, dkim_pass: bool, founder: frozenset[str]) -> str | None:
    """Why this mail is not the founder's own, signed (None: it is): the envelope and the only
    header From are his, and DKIM passes."""
    if not (sender and sender.lower() in founder and _header_from(raw) == [sender.lower()]):
        return "not_from_the_founder"
    return None if dkim_pass else "not_dkim_verified"


def judge(thread: Thread, *, raw: bytes, sender: str | None, dkim_pass: bool, subject: str, body: str,
          cover: str, founder: frozenset[str]) -> Judgement:
    """Whether this reply is the founder's decision, checked in order; the first failing
    check is the reason audited."""
    if why := not_the_founders(raw=raw, sender=sender, dkim_pass=dkim_pass, founder=founder):
        return Judgement(None, None, why)
    if is_request(thread.kind) and not (thread.token and (thread.token in subject or thread.token in body)):
        return Judgement(None, None, "token_missing")
    verdict, note = verdict_of(cover)
    if verdict is None:
        return Judgement(None, None, "no_verdict_in_the_reply_text")
    return Judgement(verdict, note, None)


# -- the gate, before a first launch's claim ------------------------------------------------

def launch_facts(conn: Conn, state: dict[str, Any], kind: str, s: Settings) -> policy.LaunchFacts:
    row = conn.execute(
        """SELECT (SELECT usd FROM synedre.spend_today) AS day,
                  NOT EXISTS (SELECT 1 FROM synedre.launches l JOIN synedre.email_states e
                                  ON e.message_id = l.message_id WHERE e.client_id = %(c)s) AS first""",
        {"c": state["client_id"]}).fetchone()
    assert row is not None  # a SELECT without FROM returns its one row
    keep = tools.configured(s.agent_tools)
    wider = set(tools.policy(kind, keep).allowed) - set(tools.policy("lean", keep).allowed)
    return policy.LaunchFacts(
        intent=state["intent"], complexity=state["complexity"],
        first_launch=state["client_id"] is None or bool(row["first"]), confidence=state["confidence"],
        estimated_usd=s.max_budget_usd, spent_today_usd=float(row["day"] or 0), daily_cap_usd=s.daily_spend_cap_usd,
        tools_wider_than_lean=bool(wider))


def approved(conn: Conn, message_id: int) -> int | None:
    """The founder's OK for the message's first launch: its request's id (the launch records it)."""
    row = conn.execute("SELECT id FROM synedre.approvals WHERE message_id = %s AND gate = %s AND status = %s",
                       (message_id, LAUNCH_GATE, str(ApprovalStatus.APPROVED))).fetchone()
    return int(row["id"]) if row else None


def asks(conn: Conn, state: dict[str, Any], kind: str, model: str, s: Settings) -> dict[str, Any] | None:
    """Before a first launch not yet approved: what the founder is asked (the rule, why, the
    facts he reads), or None when no rule of the policy asks."""
    if approved(conn, state["message_id"]) is not None:
        return None
    facts = launch_facts(conn, state, kind, s)
    asked = policy.evaluate(policy.load(s.approval_policy_file), facts)
    if asked is None:
        return None
    keep = tools.configured(s.agent_tools)
    return {"rule": asked.rule, "why": asked.why, "client": state.get("client_codename"), "intent": state["intent"],
            "complexity": state["complexity"], "confidence": state["confidence"], "model": model,
            "tools": list(tools.policy(kind, keep).allowed), "estimated_usd": facts.estimated_usd}


def ask_launch(conn: Conn, message_id: int, told: dict[str, Any]) -> runner.Done:
    """Open the launch's request (the spawn stage's result moves the message to
    `awaiting_approval` in the same transaction)."""
    conn.execute(
        """INSERT INTO synedre.approvals (message_id, rule, token, facts, expires_at)
           VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))""",
        (message_id, told["rule"], secrets.token_hex(6), Jsonb(told), APPROVAL.stuck_after_s))
    return runner.Done(Status.AWAITING_APPROVAL, "approval_requested", told)


# -- a decision, once -----------------------------------------------------------------------

def decide(conn: Conn, message_id: int, *, approve: bool, by: str, reply_message_id: str | None = None,
           note: str | None = None, approval_id: int | None = None) -> str | None:
    """Consume the open, unexpired request of `message_id` (the one `approval_id` names, when
    given: the request a reply answers) and move the message on to its gate's stage, in the
    caller's transaction. None when this call won; else why nothing changed."""
    status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REFUSED
    row = conn.execute(
        """UPDATE synedre.approvals SET status = %s, decided_at = now(), decided_by = %s,
                  decision_message_id = %s, note = %s
            WHERE message_id = %s AND status = %s AND expires_at > now() AND (%s::bigint IS NULL OR id = %s)
        RETURNING id, rule, gate""",
        (str(status), by, reply_message_id, note, message_id, str(ApprovalStatus.WAITING), approval_id,
         approval_id)).fetchone()
    if row is None:
        return why_closed(conn, message_id, approval_id)
    detail = {"approval_id": row["id"], "rule": row["rule"], "gate": row["gate"], "by": by,
              "reply_message_id": reply_message_id}
    done = runner.Done(RELEASED_TO[row["gate"]], "approval_granted", detail) if approve else \
        runner.Done(Status.REFUSED, "approval_refused", {**detail, "note": note})
    if not approve:  # his reasons are a lesson for the next launch (SPEC §9.8)
        lessons.note(conn, "approval_refused", f"approval_refused:{row['id']}", message_id, note)
    if not runner.move(conn, APPROVAL, message_id, done, at=Status.AWAITING_APPROVAL):
        raise RuntimeError(f"message {message_id}: its request was open but it was not awaiting approval")
    return None


def why_closed(conn: Conn, message_id: int, approval_id: int | None = None) -> str:
    row = conn.execute("SELECT status, expires_at <= now() AS late FROM synedre.approvals WHERE message_id = %s"
                       " AND (%s::bigint IS NULL OR id = %s) ORDER BY id DESC LIMIT 1",
                       (message_id, approval_id, approval_id)).fetchone()
    if row is None:
        return "no_request"
    if row["status"] == ApprovalStatus.WAITING and row["late"]:
        return "request_expired"
    return f"request_already_{row['status']}"


def expired(conn: Conn, message_id: int) -> runner.Done | None:
    """End a request past its expiry: the result that ends its message `refused` (the approval
    stage's, written by the runner); None if it was not due."""
    row = conn.execute(
        """UPDATE synedre.approvals SET status = %s, decided_at = now(), decided_by = 'expiry'
            WHERE message_id = %s AND status = %s AND expires_at <= now() RETURNING id, rule, expires_at""",
        (str(ApprovalStatus.EXPIRED), message_id, str(ApprovalStatus.WAITING))).fetchone()
    if row is None:
        return None
    return runner.Done(Status.REFUSED, "approval_expired", {"approval_id": row["id"], "rule": row["rule"],
                                                           "expired_at": row["expires_at"].isoformat()})


def released_stage(conn: Conn, message_id: int) -> str:
    """The stage an OK handed the message back to (spawn for a launch, deploy for a deploy)."""
    row = conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (message_id,)).fetchone()
    stage = consumer_of(row["status"]) if row else None
    return stage.name if stage else SPAWN.name


def gate_deploy(conn: Conn, message_id: int, launch_id: int | None, s: Settings) -> tuple[bool, int | None]:
    """Before a deploy whose script or infrastructure changed: (the policy asks, the approved
    request's id for this launch's deploy, if any)."""
    approved = conn.execute(
        "SELECT id FROM synedre.approvals WHERE message_id = %s AND gate = %s AND launch_id = %s AND status = %s",
        (message_id, DEPLOY_GATE, launch_id, str(ApprovalStatus.APPROVED))).fetchone()
    return policy.load(s.approval_policy_file).touches_deploy.enabled, approved["id"] if approved else None


def ask_deploy(conn: Conn, message_id: int, launch_id: int, told: dict[str, Any]) -> runner.Done:
    """Open the deploy's request (the deploy stage's write moves the message to
    `awaiting_approval` with the returned result, in the same transaction)."""
    conn.execute(
        """INSERT INTO synedre.approvals (message_id, gate, launch_id, rule, token, facts, expires_at)
           VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s))""",
        (message_id, DEPLOY_GATE, launch_id, told["rule"], secrets.token_hex(6), Jsonb(told), APPROVAL.stuck_after_s))
    return runner.Done(Status.AWAITING_APPROVAL, "approval_requested", {k: v for k, v in told.items() if k != "diff"})


def record_verdict(conn: Conn, message_id: int, verdict: str, note: str | None, reply_message_id: str) -> bool:
    """The founder's verdict on a recap (the first one counts)."""
    row = conn.execute(
        """INSERT INTO synedre.recap_verdicts (message_id, verdict, note, reply_message_id)
           VALUES (%s, %s, %s, %s) ON CONFLICT (message_id) DO NOTHING RETURNING message_id""",
        (message_id, "accepted" if verdict == "ok" else "rejected", note, reply_message_id)).fetchone()
    if row is None:
        return False
    messages.audit(conn, message_id, "recap_verdict", verdict=verdict, reply_message_id=reply_message_id)
    if verdict == "non":  # his note is a lesson for the next launch (SPEC §9.8)
        lessons.note(conn, "recap_rejected", f"recap_rejected:{message_id}", message_id, note)
    return True
