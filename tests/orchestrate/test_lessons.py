"""Lessons learnt from the founder (issue 28, SPEC §9.8), against the real database and the
real CLI: noted in the decision's transaction, learnt after it (redacted, embedded,
deduplicated, an escalation summed up with its figures), listed, added and retired."""
from __future__ import annotations

import json
import subprocess
import sys

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from synedre import db as fleet_db
from synedre.approvals import decisions
from synedre.config import get_settings
from synedre.orchestrate import lessons
from tests.conftest import _reset_settings
from tests.services import stack
from tests.services.llm_server import start_llm_server

pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]

SECRET = "sk-ant-api03-LESSONSECRET0123456789abcdef"


@pytest.fixture
def world(db, monkeypatch):
    """Two clients, a message of each with a launch by `frontend`, the founder's key as a
    configured secret (the redactor must hide it)."""
    monkeypatch.setenv("SYNEDRE_ANTHROPIC_API_KEY", SECRET)
    monkeypatch.delenv("SYNEDRE_MISTRAL_API_KEY", raising=False)
    _reset_settings()
    ids = {}
    with psycopg.connect(db, autocommit=True, row_factory=dict_row) as c:
        for codename in ("garage-martin", "boulangerie-dupont"):
            client = c.execute("INSERT INTO synedre.clients (codename, name) VALUES (%s, %s) RETURNING id",
                               (codename, codename)).fetchone()["id"]
            mid = c.execute("INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, raw, size,"
                            " subject) VALUES ('atlas', 1, %s, %s, 'x', 1, 'La page contact') RETURNING id",
                            (client, f"<{codename}@test>")).fetchone()["id"]
            c.execute("INSERT INTO synedre.email_states (message_id, status, client_id) VALUES (%s, 'actioned', %s)",
                      (mid, client))
            c.execute("INSERT INTO synedre.launches (message_id, attempt, status, agent_codename)"
                      " VALUES (%s, 1, 'succeeded', 'frontend')", (mid,))
            ids[codename] = (client, mid)
    yield ids
    _reset_settings()


def rows(url, sql, *args):
    with psycopg.connect(url, row_factory=dict_row) as c:
        return c.execute(sql, args).fetchall()


def verdict(mid: int, note: str, reply: str) -> None:
    with fleet_db.transaction() as conn:
        decisions.record_verdict(conn, mid, "non", note, reply)


def test_a_non_s_note_becomes_one_lesson_of_its_client_redacted_and_the_same_non_twice_is_still_one(db, world):
    client, mid = world["garage-martin"]
    verdict(mid, f"Le bouton payer manque ; la clé {SECRET} ne doit jamais apparaître.", "<r1@test>")
    assert lessons.learn_message(mid, get_settings())[0].startswith("lesson_learnt")
    (lesson,) = rows(db, "SELECT * FROM synedre.lessons")
    assert lesson["client_id"] == client and lesson["embedding_model"] == "local/hash-1024"
    assert "Le bouton payer manque" in lesson["body"] and SECRET not in lesson["body"]
    assert SECRET not in json.dumps(rows(db, "SELECT text FROM synedre.lesson_sources"), default=str)
    assert rows(db, "SELECT o.id FROM synedre.agents o WHERE o.codename = 'frontend'")[0]["id"] == \
        lesson["owner_agent_id"]
    # the same reply processed again is the same source: nothing new
    verdict(mid, "Le bouton payer manque.", "<r1@test>")
    assert lessons.learn_message(mid, get_settings()) == []
    # the same NON on another recap of the client: said again, still one lesson
    with psycopg.connect(db, autocommit=True) as c:
        other = c.execute("INSERT INTO synedre.raw_messages (mailbox, uidvalidity, uid, message_id, raw, size,"
                          " subject) VALUES ('atlas', 1, 99, '<again@test>', 'x', 1, 'La page contact')"
                          " RETURNING id").fetchone()[0]
        c.execute("INSERT INTO synedre.email_states (message_id, status, client_id) VALUES (%s, 'actioned', %s)",
                  (other, client))
        c.execute("INSERT INTO synedre.launches (message_id, attempt, status, agent_codename)"
                  " VALUES (%s, 1, 'succeeded', 'frontend')", (other,))
    verdict(other, f"Le bouton payer manque ; la clé {SECRET} ne doit jamais apparaître.", "<r2@test>")
    assert lessons.learn_message(other, get_settings())[0].startswith(f"lesson_said_again {lesson['id']}")
    (again,) = rows(db, "SELECT * FROM synedre.lessons")
    assert again["times_said"] == 2
    assert [(r["kind"], r["message_id"]) for r in rows(db, "SELECT * FROM synedre.lesson_sources ORDER BY id")] == \
        [("recap_rejected", mid), ("recap_rejected", other)]
    with fleet_db.transaction() as conn:  # a refusal's note, of the other client: a lesson of its own
        b_mid = world["boulangerie-dupont"][1]
        conn.execute("UPDATE synedre.email_states SET status = 'awaiting_approval' WHERE message_id = %s", (b_mid,))
        conn.execute("INSERT INTO synedre.approvals (message_id, rule, token, facts, expires_at)"
                     " VALUES (%s, 'first_launch', 'tok', %s, now() + interval '1 hour')", (b_mid, Jsonb({})))
        assert decisions.decide(conn, b_mid, approve=False, by="op", note="Jamais le samedi matin.") is None
    assert lessons.learn_message(b_mid, get_settings())[0].startswith("lesson_learnt")
    assert [(r["client_id"], r["times_said"]) for r in rows(db, "SELECT * FROM synedre.lessons ORDER BY id")] == \
        [(client, 2), (world["boulangerie-dupont"][0], 1)]


def test_a_non_without_a_note_and_an_ok_teach_nothing(db, world):
    _, mid = world["garage-martin"]
    with fleet_db.transaction() as conn:
        decisions.record_verdict(conn, mid, "non", None, "<r@test>")
    _, other = world["boulangerie-dupont"]
    with fleet_db.transaction() as conn:
        decisions.record_verdict(conn, other, "ok", "parfait", "<r2@test>")
    assert rows(db, "SELECT * FROM synedre.lesson_sources") == []


def test_an_escalation_s_lesson_carries_the_failing_figures_and_its_summary(db, world):
    _, mid = world["garage-martin"]
    with psycopg.connect(db, autocommit=True) as c:
        launch = c.execute("SELECT id FROM synedre.launches WHERE message_id = %s", (mid,)).fetchone()[0]
        run = c.execute("INSERT INTO synedre.qa_runs (message_id, launch_id, iteration, target, deploy_ok, verdict)"
                        " VALUES (%s, %s, 3, 'garage', true, 'failed') RETURNING id", (mid, launch)).fetchone()[0]
        c.execute("INSERT INTO synedre.qa_checks (qa_run_id, declared, routes, resolved, resolution, status,"
                  " reasons, http_status, detail) VALUES (%s, '/contact', '{/contact,/contacts}', '/contact',"
                  " 'exact', 'failed', %s, 500, %s)",
                  (run, Jsonb(["http_error"]),
                   Jsonb({"console_errors": ["a", "b"], "page_errors": ["TypeError: x is undefined"]})))
    asked = []

    def answer(body, path):
        if path.endswith("/embeddings"):
            return None
        asked.append(body)
        return "La page /contact répondait 500 : vérifier le formulaire côté serveur avant de livrer."
    llm = start_llm_server(answer)
    try:
        with fleet_db.transaction() as conn:
            facts = lessons.escalation_facts(conn, mid, 3, 3)
            lessons.note(conn, "escalation", f"escalation:{mid}:3", mid, facts)
        assert "Route /contact, /contacts" in facts and "HTTP 500" in facts
        assert "2 erreur(s) de console" in facts and "TypeError: x is undefined" in facts
        import os
        os.environ.update(SYNEDRE_MISTRAL_API_KEY="test-key-not-secret", SYNEDRE_MISTRAL_SERVER_URL=llm.url)
        _reset_settings()
        assert lessons.learn_message(mid, get_settings())[0].startswith("lesson_learnt")
    finally:
        os.environ.pop("SYNEDRE_MISTRAL_API_KEY", None), os.environ.pop("SYNEDRE_MISTRAL_SERVER_URL", None)
        llm.stop()
    (lesson,) = rows(db, "SELECT * FROM synedre.lessons")
    assert lesson["body"].startswith("La page /contact répondait 500") and "HTTP 500" in lesson["body"]
    assert lesson["embedding_model"] == "mistral/mistral-embed"
    system = asked[0]["messages"][0]["content"]
    assert "une ou deux phrases" in system and "HTTP 500" in asked[0]["messages"][1]["content"]


def test_what_was_not_learnt_is_offered_again_by_the_sweep_once_per_delay(db, world):
    _, mid = world["garage-martin"]
    verdict(mid, "Toujours tester sur mobile.", "<r@test>")
    assert lessons.overdue(older_than_s=60) == []  # just noted: its own task is on the way
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("UPDATE synedre.lesson_sources SET created_at = now() - interval '2 minutes'")
    assert lessons.overdue(older_than_s=60) == [mid]
    assert lessons.overdue(older_than_s=60) == []  # offered: not again before the delay
    lessons.learn_message(mid, get_settings())
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("UPDATE synedre.lesson_sources SET offered_at = NULL")
    assert lessons.overdue(older_than_s=60) == []  # learnt


def cli(*args: str) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=stack.ROOT, env={**os.environ, "COLUMNS": "200"})


def test_the_cli_lists_with_provenance_adds_deduplicated_and_retires(db, world):
    _, mid = world["garage-martin"]
    verdict(mid, "Le bouton payer manque.", "<r@test>")
    lessons.learn_message(mid, get_settings())
    added = cli("lessons", "add", "--global", "Toujours un commit par changement.")
    assert added.returncode == 0 and "added" in added.stdout, added.stderr
    again = cli("lessons", "add", "--global", "Toujours un commit par changement.")
    assert "said again" in again.stdout, again.stderr
    listed = json.loads(cli("lessons", "--client", "garage-martin", "--json").stdout)
    assert [(r["client"], r["times_said"]) for r in listed] == [(None, 2), ("garage-martin", 1)]
    assert listed[1]["provenance"][0]["kind"] == "recap_rejected" and listed[1]["provenance"][0]["message_id"] == mid
    other = json.loads(cli("lessons", "--client", "boulangerie-dupont", "--json").stdout)
    assert [r["client"] for r in other] == [None]  # another client's lesson is not listed for it
    table = cli("lessons", "--client", "garage-martin")
    assert f"recap_rejected of message {mid}" in table.stdout and "Le bouton payer manque." in table.stdout
    lesson_id = listed[1]["id"]
    assert cli("lessons", "retire", str(lesson_id)).returncode == 0
    assert cli("lessons", "retire", str(lesson_id)).returncode == 1  # said once: retired already
    assert [r["id"] for r in json.loads(cli("lessons", "--json").stdout)] == [listed[0]["id"]]
    assert lesson_id in [r["id"] for r in json.loads(cli("lessons", "--retired", "--json").stdout)]
    wrong = cli("lessons", "add", "x")
    assert wrong.returncode == 2 and "--client CODENAME or --global" in wrong.stderr
    assert cli("lessons", "add", "--client", "nobody", "x").returncode == 2


@pytest.mark.unit
def test_the_recap_marks_the_lessons_the_contract_says_were_applied():
    from synedre.mail import recap_view
    from synedre.orchestrate.contract import read_contract
    contract = read_contract(json.dumps({"ok": True, "commits": [], "summary_md": "s", "lessons_applied": [7]}),
                             "lean").contract
    facts = {"contract": contract, "lessons": [{"id": 7, "title": "NON", "body": "le bouton payer"},
                                               {"id": 9, "title": "Escalade", "body": "HTTP 500 sur /contact"}]}
    assert recap_view.lesson_lines(facts) == ["#7 (appliquée) NON : le bouton payer",
                                              "#9 (non citée par l’agent) Escalade : HTTP 500 sur /contact"]
    assert recap_view.lesson_lines({"contract": None, "lessons": []}) == []
