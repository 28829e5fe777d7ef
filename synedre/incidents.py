"""The escalation path (SPEC §12): supervision incidents mailed into Atlas's own inbox.

An incident is an email like any other: appended (IMAP APPEND) unseen to the Atlas
mailbox's inbox folder, the mailbox resolved by the registry (hosts and secret in one
place), then polled, scanned, classified... by the same chain.

Two guards keep it from feeding itself:
- the loop guard: every incident mail carries `X-Synedre-Incident: <kind>`; an incident
  about a message that carries that header (its own processing) is never raised;
- coalescing: one mail per kind per UTC hour, decided by PostgreSQL's unique key on
  (kind, hour) in `synedre.incidents`, so two watchdogs racing still mail once.

Raising an incident never breaks its caller (the watchdog, the sweep): a mailbox that
cannot be reached is logged and the hour's key released, so the next run tries again.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from email.message import EmailMessage
from email.utils import formatdate
from enum import StrEnum
from typing import Any

import psycopg
from imapclient.exceptions import IMAPClientError
from psycopg.types.json import Jsonb

from synedre import mailboxes
from synedre.db.types import Conn
from synedre.log import log
from synedre.pipeline import IncidentStatus

SUBJECT_PREFIX = "[Atlas incident] "
HEADER = "X-Synedre-Incident"
MAILBOX = "atlas"
COALESCE = "hour"  # one mail per kind per date_trunc(COALESCE, now())
SWEEP_EVENTS = ("sweep_reclaimed", "sweep_requeued")  # the audit rows of synedre/sweep.py
STUCK_REOFFERS = 2


class Kind(StrEnum):
    STALE_LOCK = "stale_lock"            # a launch lock not renewed for 10 minutes
    STUCK_STAGE = "stuck_stage"          # a message sitting in a stage past its limit
    SPEND_CAP = "spend_cap"              # the daily spending cap reached
    RESTART_LOOP = "restart_loop"        # a fleet child restarting in a loop
    DEPENDENCY_DOWN = "dependency_down"  # a dependency down for more than 5 minutes


class IncidentOutcome(StrEnum):
    MAILED = "mailed"
    COALESCED = "coalesced"    # this kind was already mailed this hour
    SUPPRESSED = "suppressed"  # about an incident mail's own processing: the loop guard
    FAILED = "failed"          # the mailbox could not take it; the next run tries again


@dataclass(frozen=True)
class Incident:
    kind: Kind
    title: str
    detail: dict[str, Any]
    message_ids: tuple[int, ...] = ()  # the messages it is about, for the loop guard

    @property
    def subject(self) -> str:
        return f"{SUBJECT_PREFIX}{self.title}"


def build(incident: Incident, sender: str) -> EmailMessage:
    """The mail, pure: marked with the header the loop guard reads."""
    msg = EmailMessage()
    msg["From"] = f"Synedre supervision <{sender}>"
    msg["To"] = sender
    msg["Subject"] = incident.subject
    msg["Date"] = formatdate(usegmt=True)
    msg["Message-ID"] = f"<incident-{incident.kind}-{uuid.uuid4().hex}@synedre.invalid>"
    msg[HEADER] = str(incident.kind)
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-reply to this either
    body = [f"Incident: {incident.kind}", incident.title, ""]
    body += [json.dumps(incident.detail, indent=1, ensure_ascii=False, default=str)]
    if incident.message_ids:
        body += ["", "Messages: " + ", ".join(str(m) for m in incident.message_ids)]
    msg.set_content("\n".join(body) + "\n")
    return msg


def incident_messages(conn: Conn, message_ids: tuple[int, ...]) -> list[int]:
    """Those of `message_ids` that are incident mails themselves."""
    if not message_ids:
        return []
    return [r["id"] for r in conn.execute(
        """SELECT id FROM synedre.raw_messages m
            WHERE id = ANY(%s) AND EXISTS (SELECT 1 FROM jsonb_array_elements(m.headers) h
                                            WHERE lower(h->>0) = lower(%s))""",
        (list(message_ids), HEADER))]


def _claim(conn: Conn, incident: Incident) -> int | None:
    row = conn.execute(
        f"""INSERT INTO synedre.incidents (kind, hour, subject, detail)
            VALUES (%s, date_trunc('{COALESCE}', now()), %s, %s)
            ON CONFLICT (kind, hour) DO NOTHING RETURNING id""",
        (str(incident.kind), incident.subject, Jsonb(incident.detail))).fetchone()
    return row["id"] if row else None


def _append(box: mailboxes.Mailbox, raw: bytes) -> None:
    with box.session() as client:
        client.append(box.folder, raw)  # no \Seen: the poll takes it like any new mail


def raise_incident(incident: Incident) -> IncidentOutcome:
    """Mail `incident` into the Atlas inbox unless the loop guard or coalescing says no."""
    from synedre import db

    with db.transaction() as conn:
        own = incident_messages(conn, incident.message_ids)
        if own:
            rest = tuple(m for m in incident.message_ids if m not in own)
            log.info("incident_suppressed", kind=str(incident.kind), messages=own, others=len(rest))
            if not rest:
                return IncidentOutcome.SUPPRESSED
            incident = replace(incident, message_ids=rest,
                               detail={**incident.detail, "not_raised_for_incident_mails": own})
        incident_id = _claim(conn, incident)
    if incident_id is None:
        log.info("incident_coalesced", kind=str(incident.kind))
        return IncidentOutcome.COALESCED
    try:
        box = mailboxes.get(MAILBOX)
        _append(box, build(incident, box.username if "@" in box.username else "atlas@localhost").as_bytes())
    except (mailboxes.RegistryError, IMAPClientError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
        with db.transaction() as conn:  # released: the next watchdog or sweep tries again
            conn.execute("DELETE FROM synedre.incidents WHERE id = %s", (incident_id,))
        log.error("incident_not_mailed", kind=str(incident.kind), error=error)
        return IncidentOutcome.FAILED
    with db.transaction() as conn:
        conn.execute("UPDATE synedre.incidents SET status = %s WHERE id = %s",
                     (str(IncidentStatus.MAILED), incident_id))
    log.warning("incident_mailed", kind=str(incident.kind), incident=incident_id)
    return IncidentOutcome.MAILED


def safely(incident: Incident) -> IncidentOutcome:
    """`raise_incident` for supervision loops: the database being down is itself what the
    caller is reporting on, so it is logged, never raised into the watchdog or sweep."""
    try:
        return raise_incident(incident)
    except psycopg.Error as exc:
        log.error("incident_not_recorded", kind=str(incident.kind), error=f"{type(exc).__name__}: {exc}"[:300])
        return IncidentOutcome.FAILED


# --- the incidents supervision raises ---------------------------------------------------

def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def stale_locks(stale: list[dict[str, Any]]) -> Incident:
    ids = tuple(i for i in (_int(lock.get("message_id")) for lock in stale) if i is not None)
    return Incident(Kind.STALE_LOCK, f"{len(stale)} launch lock(s) not renewed for 10 minutes",
                    {"locks": stale}, ids)


def stuck_stages(stuck: list[tuple[int, str]]) -> Incident:
    return Incident(Kind.STUCK_STAGE, f"{len(stuck)} message(s) stuck past their stage's limit",
                    {"stuck": [{"message_id": m, "stage": s} for m, s in stuck]},
                    tuple(m for m, _ in stuck))


def escalate_stuck(stuck: list[tuple[int, str]]) -> IncidentOutcome | None:
    """The sweep's re-offer is the first answer to a stuck stage (a lost task, a killed
    worker: routine recovery); a message the sweep had to re-offer `STUCK_REOFFERS` times
    within the hour is one it cannot unstick, and that is the incident."""
    from synedre import db

    if not stuck:
        return None
    try:
        with db.transaction() as conn:
            again = {r["message_id"] for r in conn.execute(
                """SELECT message_id FROM synedre.audit_log
                    WHERE message_id = ANY(%s) AND event = ANY(%s) AND at > now() - interval '1 hour'
                    GROUP BY message_id HAVING count(*) >= %s""",
                ([m for m, _ in stuck], list(SWEEP_EVENTS), STUCK_REOFFERS))}
    except psycopg.Error as exc:
        log.error("incident_not_recorded", kind=str(Kind.STUCK_STAGE), error=f"{type(exc).__name__}: {exc}"[:300])
        return IncidentOutcome.FAILED
    persistent = [(m, st) for m, st in stuck if m in again]
    return safely(stuck_stages(persistent)) if persistent else None


def spend_cap(spent: Any, cap: float) -> Incident:
    return Incident(Kind.SPEND_CAP, "the daily spending cap is reached", {"spent_usd": str(spent), "cap_usd": cap})


def restart_loop(child: str, restarts: int, window_s: float) -> Incident:
    return Incident(Kind.RESTART_LOOP, f"fleet child {child} restarting in a loop",
                    {"child": child, "restarts": restarts, "window_s": window_s})


def dependency_down(name: str, down_s: float) -> Incident:
    return Incident(Kind.DEPENDENCY_DOWN, f"{name} down for {down_s:.0f} s", {"dependency": name, "down_s": down_s})
