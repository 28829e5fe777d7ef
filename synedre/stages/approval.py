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
from synedre.mail import outbound, recap_view
from synedre.pipeline import BY_NAME, ApprovalStatus

STAGE = BY_NAME["approval"]


def request_text(row: dict[str, Any], cover: str) -> tuple[str, str]:
    """(subject, text) of the request: what was asked (fenced), the facts, how to answer."""
    f, token, fence = row["facts"], row["token"], secrets.token_hex(4)
    subject = f"Accord requis {token} : {row['subject'] or '(sans objet)'}"
    if row["gate"] == decisions.DEPLOY_GATE:
        return subject, _deploy_request_text(row, fence)
    lines = [f"Un lancement attend votre accord (règle {f['rule']} : {f['why']}).", "",
             f"Client : {f.get('client') or 'inconnu'}", f"Intention : {f['intent']}/{f['complexity']}"
             f" (confiance {float(f.get('confidence') or 0):.2f})", f"Modèle : {f['model']}",
             f"Outils : {', '.join(f['tools']) or 'aucun'}", f"Coût estimé : au plus {f['estimated_usd']:.2f} USD", "",
             f"Ce qui est demandé (le texte du courriel, entre les marques {fence}) :",
             f"----- début {fence} -----", cover.strip() or "(vide)", f"----- fin {fence} -----", "",
             *_previous(row, fence),
             "Pour répondre : répondez à ce message en commençant par OK pour lancer, ou par NON pour refuser"
             " (une note peut suivre). Seule votre propre réponse signée compte, pas le texte cité.",
             f"Sans réponse le {row['expires_at']:%Y-%m-%d %H:%M} UTC, la demande expire.", "",
             f"Référence de la demande : {token}"]
    return subject, "\n".join(lines)


def _previous(row: dict[str, Any], fence: str) -> list[str]:
    """A follow-up (a new request in a recap's thread): what the previous request's work
    changed, files with their lines added and removed, branch and commits (the paths and
    subjects are the agent's, redacted when they were taken: fenced here)."""
    if not row.get("follows_message_id"):
        return []
    before = f"Cette demande fait suite à une précédente (message {row['follows_message_id']})"
    if not row.get("previous"):
        return [f"{before}, dont le travail n'a enregistré aucun changement dans le dépôt.", ""]
    return [f"{before}. Ce que son travail a changé (écrit par l'agent, entre les marques {fence}) :",
            f"----- début {fence} -----", *recap_view.change_lines(row["previous"], notes=False),
            f"----- fin {fence} -----", ""]


def _deploy_request_text(row: dict[str, Any], fence: str) -> str:
    """The deploy's request: which files changed how the site is deployed, their diff
    (redacted when it was taken, fenced here: it is the agent's text), how to answer."""
    f, token = row["facts"], row["token"]
    lines = [f"Un déploiement attend votre accord (règle {f['rule']} : {f['why']}).", "",
             f"Client : {f.get('client') or 'inconnu'}", f"Cible : {f.get('target')}",
             f"Fichiers modifiés : {', '.join(f.get('paths') or [])}",
             f"Depuis {str(f.get('baseline') or 'le début')[:12]} (le dernier déploiement accepté)"
             f" jusqu'à {str(f.get('head'))[:12]}.",
             "", "Ce script est exécuté par la flotte ; lisez-le avant d'accepter.",
             f"Le diff (écrit par l'agent, entre les marques {fence}) :", f"----- début {fence} -----",
             (f.get("diff") or "").rstrip() or "(vide)", f"----- fin {fence} -----", "",
             "Pour répondre : répondez à ce message en commençant par OK pour déployer, ou par NON pour refuser"
             " (une note peut suivre). Seule votre propre réponse signée compte, pas le texte cité.",
             f"Sans réponse le {row['expires_at']:%Y-%m-%d %H:%M} UTC, la demande expire.", "",
             f"Référence de la demande : {token}"]
    return "\n".join(lines)


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
            text = (f"Votre accord n'est pas venu à temps : la demande ({row['rule']}, référence {row['token']}) a"
                    f" expiré le {row['expires_at']:%Y-%m-%d %H:%M} UTC. Rien n'a été lancé ; le message est clos"
                    " (refused).")
            outbound.send_to_founder(db.transaction, row["mailbox"], mid, decisions.EXPIRED_KIND,
                                     subject=f"Demande expirée : {row['subject'] or '(sans objet)'}", text=text)
            return _Mailed(row, None)
        cover = split_cover_quoted(body_text(bytes(row["raw"]))).cover
        subject, text = request_text(row, cover)
        kind = decisions.request_kind(row["gate"], row["launch_id"])
        return _Mailed(row, outbound.send_to_founder(db.transaction, row["mailbox"], mid, kind,
                                                     subject=subject, text=text))

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
