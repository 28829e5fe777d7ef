"""Stage `approval`: a launch held by the approval policy (synedre/approvals) waits for the
founder's OK. This stage mails him the request (once: the mail facade's exactly-once send,
threaded under his original email, with the request's token) and, when the sweep offers
the message again at the request's expiry, ends it `refused` with one alert. The decision
itself is his reply's (consumed by the classify stage) or an operator's command."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from synedre import db, runner
from synedre.approvals import decisions
from synedre.classify.split import split_cover_quoted
from synedre.config import Settings
from synedre.db import changes
from synedre.db.types import Conn
from synedre.ingest.mime import body_text
from synedre.log import log
from synedre.mail import outbound, recap_view, templating
from synedre.pipeline import BY_NAME, ApprovalStatus

STAGE = BY_NAME["approval"]


def request(row: dict[str, Any], cover: str) -> tuple[str, str, dict[str, Any]]:
    """(subject, template, data) of the request (approval.* for a launch, approval-deploy.*
    for a deploy): what was asked or the deploy's diff, fenced (it is someone else's text),
    the facts, how to answer."""
    subject = f"Accord requis {row['token']} : {row['subject'] or '(sans objet)'}"
    if row["gate"] == decisions.DEPLOY_GATE:
        return subject, "approval-deploy", _deploy_request(row)
    f = row["facts"]
    return subject, "approval", {
        **_answer(row), "client": f.get("client") or "inconnu", "intent": f["intent"], "complexity": f["complexity"],
        "confidence": float(f.get("confidence") or 0), "model": f["model"], "tools": list(f["tools"]),
        "estimated_usd": f["estimated_usd"], "cover": cover.strip() or "(vide)",
        # a follow-up (a new request in a recap's thread): what the previous request's work changed
        # (the paths and subjects are the agent's, redacted when they were taken)
        "follows": row.get("follows_message_id"),
        "previous": [recap_view.change_view(c, notes=False) for c in row.get("previous") or []]}


def _answer(row: dict[str, Any]) -> dict[str, Any]:
    """What every request says: the rule and why, its marks, expiry and reference."""
    return {"rule": row["facts"]["rule"], "why": row["facts"]["why"], "fence": secrets.token_hex(4),
            "expires": f"{row['expires_at']:%Y-%m-%d %H:%M}", "token": row["token"]}


def _deploy_request(row: dict[str, Any]) -> dict[str, Any]:
    """The deploy's request: which files changed how the site is deployed, their diff
    (redacted when it was taken), how to answer."""
    f = row["facts"]
    return {**_answer(row), "client": f.get("client") or "inconnu", "target": f.get("target"),
            "paths": list(f.get("paths") or []), "baseline": str(f.get("baseline") or "le début")[:12],
            "head": str(f.get("head"))[:12], "diff": (f.get("diff") or "").rstrip() or "(vide)"}


def expired(row: dict[str, Any]) -> dict[str, Any]:
    """The data of the mail (approval-expired.*) that says a request expired unanswered."""
    return {"rule": row["rule"], "token": row["token"], "expires": f"{row['expires_at']:%Y-%m-%d %H:%M}"}


@dataclass(frozen=True)
class _Mailed:
    """What this run sent: the request (None: the expiry's alert, the request being due)."""
    row: dict[str, Any]
    sent: outbound.SendResult | None


class Approval(runner.StageCode[dict[str, Any], _Mailed]):
    """Mail the request (idempotent), or expire it when due: the message then ends `refused`.
    The message is not claimed: it waits at `awaiting_approval` until a decision moves it."""
    stage = STAGE

    def load(self, conn: Conn, claim: runner.Claim) -> dict[str, Any] | runner.Skip:
        row = conn.execute(
            """SELECT a.*, a.expires_at <= now() AS due, r.mailbox, r.subject, r.raw,
                      r.message_id AS message_id_header, s.follows_message_id
                 FROM synedre.approvals a JOIN synedre.email_states s ON s.message_id = a.message_id
                 JOIN synedre.raw_messages r ON r.id = a.message_id WHERE a.message_id = %s
                ORDER BY a.id DESC LIMIT 1""",
            (claim.message_id,)).fetchone()
        if row is None:
            return runner.Skip("no approval request")
        if row["status"] != ApprovalStatus.WAITING:
            return runner.Skip(f"request already {row['status']}")
        if row["follows_message_id"]:  # a new request in a recap's thread: what that work changed
            row["previous"] = changes.of_message(conn, row["follows_message_id"], patch=False)
        return row

    def work(self, claim: runner.Claim, row: dict[str, Any]) -> _Mailed:
        mid = claim.message_id
        if row["due"]:  # one alert first (the facade sends it once), then the request and the message end
            mail = templating.mail("approval-expired", expired(row))
            outbound.send_to_founder(db.transaction, row["mailbox"], mid, decisions.EXPIRED_KIND,
                                     subject=f"Demande expirée : {row['subject'] or '(sans objet)'}", text=mail.text,
                                     html=mail.html)
            return _Mailed(row, None)
        cover = split_cover_quoted(body_text(bytes(row["raw"]))).cover
        subject, template, data = request(row, cover)
        mail = templating.mail(template, data)
        kind = decisions.request_kind(row["gate"], row["launch_id"])
        return _Mailed(row, outbound.send_to_founder(db.transaction, row["mailbox"], mid, kind,
                                                     subject=subject, text=mail.text, html=mail.html))

    def write(self, conn: Conn, claim: runner.Claim, mailed: _Mailed) -> runner.Result:
        row = mailed.row
        if mailed.sent is None:
            return decisions.expired(conn, claim.message_id) or runner.Skip("request no longer open")
        return runner.Held(f"waiting for the founder's OK until {row['expires_at']:%Y-%m-%d %H:%M} UTC "
                           f"(rule {row['rule']})", "approval_waiting")

    def after(self, claim: runner.Claim, worked: object, result: runner.Done | runner.Held) -> None:
        if isinstance(result, runner.Done):
            log.warning("approval_expired", message=claim.message_id, rule=result.detail["rule"])
        elif isinstance(result, runner.Held):
            log.info("approval_request_mailed", message=claim.message_id)


def run(message_id: int, s: Settings | None = None) -> runner.Result:
    return runner.run(Approval(), message_id)
