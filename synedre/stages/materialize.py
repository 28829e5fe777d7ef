"""Stage `materialize`: exactly one run, question, negotiation or advice (SPEC §7)."""
from __future__ import annotations

from synedre import runner
from synedre.db.types import Conn
from synedre.log import log
from synedre.materialize.chantier import Candidate, match
from synedre.message import ParsedMessage
from synedre.pipeline import BY_NAME, Status

STAGE = BY_NAME["materialize"]

REF_TYPE = "atlas_inbox"
LINKS = {"run": "run_id", "question": "question_id", "negociation": "negotiation_id", "conseil": "advice_id"}


def _upsert(conn, table: str, state: dict, title: str, extra: dict) -> int:
    """run/question: keyed on (ref_type, ref_id); a second call returns the same row."""
    cols = ", ".join(["ref_type", "ref_id", "client_id", "title", *extra])
    vals = ", ".join(["%s"] * (4 + len(extra)))
    return conn.execute(
        f"INSERT INTO synedre.{table} ({cols}) VALUES ({vals}) ON CONFLICT (ref_type, ref_id)"
        " DO UPDATE SET updated_at = now() RETURNING id",
        (REF_TYPE, str(state["message_id"]), state["client_id"], title, *extra.values())).fetchone()["id"]


def _insert_once(conn, table: str, state: dict, title: str) -> int:
    """negociation/conseil: one per message, enforced by the unique raw_message_id."""
    conn.execute(f"INSERT INTO synedre.{table} (raw_message_id, client_id, title) VALUES (%s, %s, %s)"
                 " ON CONFLICT (raw_message_id) DO NOTHING", (state["message_id"], state["client_id"], title))
    return conn.execute(f"SELECT id FROM synedre.{table} WHERE raw_message_id = %s",
                        (state["message_id"],)).fetchone()["id"]


def _chantier(conn, state: dict, msg: ParsedMessage) -> int | None:
    if state["client_id"] is None:
        return None
    rows = conn.execute("SELECT id, title, coalesce(mission_letter, '') AS m FROM synedre.chantiers"
                        " WHERE client_id = %s AND status = 'open'", (state["client_id"],)).fetchall()
    text = f"{msg.subject}\n{msg.body[:4000]}"
    return match(text, [Candidate(r["id"], r["title"], r["m"]) for r in rows])


class Materialize(runner.StageCode[None, None]):
    """Only SQL: the constraint-guarded insert, the link and the audit, in the write, in the
    claim's own transaction (`instant`)."""
    stage = STAGE

    def instant(self, loaded: None) -> bool:
        return True

    def load(self, conn: Conn, claim: runner.Claim) -> None:
        return None

    def work(self, claim: runner.Claim, loaded: None) -> None:
        return None

    def write(self, conn: Conn, claim: runner.Claim, worked: None) -> runner.Done:
        state = claim.state
        intent, title = state["intent"], (state["subject"] or "(sans objet)")[:300]
        if intent == "noise":
            return runner.Done(Status.NOISE, "materialize_skipped_noise")
        chantier = None
        if intent in ("run", "question"):
            extra = {"complexity": state["complexity"]} if intent == "run" else {}
            table = "runs" if intent == "run" else "questions"
            new_id = _upsert(conn, table, state, title, extra)
            chantier = _chantier(conn, state, ParsedMessage.from_claim(state, []))
            if chantier is not None:
                conn.execute(f"UPDATE synedre.{table} SET chantier_id = %s WHERE id = %s", (chantier, new_id))
        else:
            new_id = _insert_once(conn, "negotiations" if intent == "negociation" else "advices", state, title)
        return runner.Done(Status.MATERIALIZED, detail={"kind": intent, "id": new_id, "chantier_id": chantier},
                           fields={LINKS[intent]: new_id, "chantier_id": chantier})

    def after(self, claim: runner.Claim, worked: object, result: runner.Done | runner.Held) -> None:
        if isinstance(result, runner.Done) and result.status == Status.MATERIALIZED:
            log.info("materialized", message=claim.message_id, kind=result.detail["kind"], id=result.detail["id"])


def run(message_id: int) -> runner.Result:
    return runner.run(Materialize(), message_id)
