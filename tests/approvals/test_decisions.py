"""The approval gate and the decisions against the real database, one door at a time: the
request opened with the message moved, a decision consumed once (ten at once), the
expiry, the recap verdict. Each asserts the rows as stored (written for the mutation run,
docs/mutation.md: the approval consumption is in its scope)."""
from __future__ import annotations

import subprocess
import sys
import threading

import psycopg
import pytest
from psycopg.rows import dict_row

from synedre import ROOT
from synedre.approvals import decisions
from synedre.config import Settings
from synedre.pipeline import ApprovalStatus, Status
from synedre.stages.poll import ingest_one
from tests.conftest import CORPUS
from tests.services import approvals

pytestmark = pytest.mark.timeout(60)
RUN_PLAN = "[run_plan]\nenabled = true\n[spend_share]\nenabled = true\nshare = 0.5\n"


@pytest.fixture
def conn(db):
    with psycopg.connect(db, row_factory=dict_row, autocommit=True) as c:
        yield c


def waiting_message(conn, tmp_path, complexity="plan", n=1, client_id=None) -> int:
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    raw = raw.replace(b"Message-ID: <", f"Message-ID: <dec{n}{complexity}.".encode(), 1)
    mid = ingest_one(raw, "atlas", 1, n, Settings(state_dir=tmp_path), lambda _: None)
    conn.execute("UPDATE synedre.email_states SET status = 'materialized', intent = 'run', complexity = %s,"
                 " confidence = 0.93, client_id = %s WHERE message_id = %s", (complexity, client_id, mid))
    return mid


def state_of(conn, mid):
    return conn.execute("SELECT s.*, r.message_id AS message_id_header, NULL::text AS client_codename"
                        " FROM synedre.email_states s JOIN synedre.raw_messages r ON r.id = s.message_id"
                        " WHERE s.message_id = %s", (mid,)).fetchone()


def settings(tmp_path, text=RUN_PLAN, **kw) -> Settings:
    policy = tmp_path / f"policy-{abs(hash(text))}.toml"
    policy.write_text(text)
    return Settings(state_dir=tmp_path, approval_policy_file=policy, **kw)


def gate(conn, mid, s, kind="plan"):
    with conn.transaction():
        return approvals.gate(conn, state_of(conn, mid), kind, "claude-sonnet", s)


def events(conn, mid, event):
    return [r["detail"] for r in conn.execute("SELECT detail FROM synedre.audit_log WHERE message_id = %s"
                                              " AND event = %s ORDER BY id", (mid, event))]


def status(conn, mid):
    return conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (mid,)).fetchone()["status"]


def test_a_matching_rule_opens_one_request_and_moves_the_message_in_the_same_transaction(conn, tmp_path):
    mid = waiting_message(conn, tmp_path)
    done = gate(conn, mid, settings(tmp_path))
    assert done.status == Status.AWAITING_APPROVAL and status(conn, mid) == "awaiting_approval"
    row = conn.execute("SELECT *, expires_at - created_at AS ttl FROM synedre.approvals WHERE message_id = %s",
                       (mid,)).fetchone()
    assert (row["rule"], row["status"], row["decided_at"]) == ("approval_rule_run_plan", "waiting", None)
    assert len(row["token"]) == 12 and row["ttl"].total_seconds() == 24 * 3600
    assert row["facts"]["model"] == "claude-sonnet" and row["facts"]["intent"] == "run"
    assert row["facts"]["estimated_usd"] == 5.0 and "Bash" in row["facts"]["tools"]
    detail, = events(conn, mid, "approval_requested")
    assert detail["rule"] == "approval_rule_run_plan" and detail["complexity"] == "plan"


def test_no_rule_lets_the_launch_go_and_an_approved_request_is_returned_for_the_launch_row(conn, tmp_path):
    lean = waiting_message(conn, tmp_path, complexity="leger")
    assert gate(conn, lean, settings(tmp_path), kind="lean") is None
    assert status(conn, lean) == "materialized" and events(conn, lean, "approval_requested") == []
    mid = waiting_message(conn, tmp_path, n=2)
    gate(conn, mid, settings(tmp_path))
    with conn.transaction():
        assert decisions.decide(conn, mid, approve=True, by="julien@atelier-moreau.fr",
                                reply_message_id="<r@x>") is None
    approved = conn.execute("SELECT id FROM synedre.approvals WHERE message_id = %s", (mid,)).fetchone()["id"]
    assert gate(conn, mid, settings(tmp_path)) == approved  # released: the launch records it, asks nothing again


def test_the_spend_share_rule_counts_today_s_spend_and_the_first_launch_rule_the_client_s_history(conn, tmp_path):
    mid = waiting_message(conn, tmp_path, complexity="leger")
    conn.execute("INSERT INTO synedre.launches (message_id, attempt, status, cost_usd) VALUES (%s, 9, 'failed', 96)",
                 (mid,))
    asked = gate(conn, mid, settings(tmp_path, daily_spend_cap_usd=200.0), kind="lean")
    assert asked.detail["rule"] == "approval_rule_spend_share"  # 96 + 5 > 100
    client = conn.execute("INSERT INTO synedre.clients (codename, name) VALUES ('neuf', 'Neuf') RETURNING id"
                          ).fetchone()["id"]
    first = waiting_message(conn, tmp_path, complexity="leger", n=3, client_id=client)
    assert gate(conn, first, settings(tmp_path, "[first_launch]\nenabled = true\n"), kind="lean").detail["rule"] \
        == "approval_rule_first_launch"
    known = waiting_message(conn, tmp_path, complexity="leger", n=4, client_id=client)
    conn.execute("UPDATE synedre.email_states SET client_id = %s WHERE message_id = %s", (client, mid))
    assert gate(conn, known, settings(tmp_path, "[first_launch]\nenabled = true\n"), kind="lean") is None


def test_ten_decisions_at_once_consume_the_request_once(db, conn, tmp_path):
    mid = waiting_message(conn, tmp_path)
    gate(conn, mid, settings(tmp_path))
    results, barrier = [], threading.Barrier(10)

    def one(n):
        with psycopg.connect(db, row_factory=dict_row) as c:
            barrier.wait()
            with c.transaction():
                results.append(decisions.decide(c, mid, approve=True, by="julien@atelier-moreau.fr",
                                                reply_message_id=f"<copy{n}@x>"))
    threads = [threading.Thread(target=one, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results, key=str) == [None] + ["request_already_approved"] * 9
    row = conn.execute("SELECT * FROM synedre.approvals WHERE message_id = %s", (mid,)).fetchone()
    assert (row["status"], row["decided_by"]) == ("approved", "julien@atelier-moreau.fr")
    assert row["decision_message_id"] in {f"<copy{n}@x>" for n in range(10)} and row["decided_at"] is not None
    assert status(conn, mid) == "materialized"
    granted, = events(conn, mid, "approval_granted")
    assert granted["reply_message_id"] == row["decision_message_id"] and granted["rule"] == "approval_rule_run_plan"


def test_non_ends_the_message_refused_with_the_note_and_nothing_decides_it_again(conn, tmp_path):
    mid = waiting_message(conn, tmp_path)
    gate(conn, mid, settings(tmp_path))
    with conn.transaction():
        assert decisions.decide(conn, mid, approve=False, by="operator:root", note="pas ce mois-ci") is None
    assert status(conn, mid) == "refused"
    row = conn.execute("SELECT status, note, decided_by FROM synedre.approvals WHERE message_id = %s",
                       (mid,)).fetchone()
    assert row == {"status": "refused", "note": "pas ce mois-ci", "decided_by": "operator:root"}
    refused, = events(conn, mid, "approval_refused")
    assert (refused["note"], refused["by"]) == ("pas ce mois-ci", "operator:root")
    with conn.transaction():
        assert decisions.decide(conn, mid, approve=True, by="x") == "request_already_refused"
    assert decisions.why_closed(conn, 999999) == "no_request"


def test_a_request_expires_only_when_due_and_then_refuses_every_decision(conn, tmp_path):
    mid = waiting_message(conn, tmp_path)
    gate(conn, mid, settings(tmp_path))
    with conn.transaction():
        assert approvals.expire(conn, mid) is False  # not due
    assert status(conn, mid) == "awaiting_approval"
    conn.execute("UPDATE synedre.approvals SET expires_at = now() - interval '1 second' WHERE message_id = %s",
                 (mid,))
    with conn.transaction():
        assert decisions.decide(conn, mid, approve=True, by="x") == "request_expired"
    assert status(conn, mid) == "awaiting_approval"
    with conn.transaction():
        assert approvals.expire(conn, mid) is True
    with conn.transaction():
        assert approvals.expire(conn, mid) is False  # once
    assert status(conn, mid) == "refused"
    row = conn.execute("SELECT status, decided_by, decided_at FROM synedre.approvals WHERE message_id = %s",
                       (mid,)).fetchone()
    assert (row["status"], row["decided_by"]) == (ApprovalStatus.EXPIRED, "expiry") and row["decided_at"]
    expired, = events(conn, mid, "approval_expired")
    assert expired["rule"] == "approval_rule_run_plan" and expired["expired_at"]
    with conn.transaction():
        assert decisions.decide(conn, mid, approve=True, by="x") == "request_already_expired"


def test_the_first_recap_verdict_counts(conn, tmp_path):
    mid = waiting_message(conn, tmp_path)
    with conn.transaction():
        assert decisions.record_verdict(conn, mid, "non", "le bouton manque", "<v1@x>") is True
        assert decisions.record_verdict(conn, mid, "ok", None, "<v2@x>") is False
    row = conn.execute("SELECT verdict, note, reply_message_id FROM synedre.recap_verdicts WHERE message_id = %s",
                       (mid,)).fetchone()
    assert row == {"verdict": "rejected", "note": "le bouton manque", "reply_message_id": "<v1@x>"}
    assert [d["verdict"] for d in events(conn, mid, "recap_verdict")] == ["non"]


def test_a_reply_names_the_request_by_in_reply_to_first_then_references(conn, tmp_path):
    mid = waiting_message(conn, tmp_path)
    other = waiting_message(conn, tmp_path, n=2)
    gate(conn, mid, settings(tmp_path))
    for m, kind, rfc in ((mid, "approval", "<atlas-approval-1@a>"), (other, "recap", "<atlas-recap-2@a>"),
                         (other, "alert", "<atlas-alert-2@a>")):
        conn.execute("INSERT INTO synedre.outbound_mail (message_id, kind, mailbox, rfc_message_id, status, draft_uid,"
                     " sent_at) VALUES (%s, %s, 'atlas', %s, 'sent', 1, now())", (m, kind, rfc))
    token = conn.execute("SELECT token FROM synedre.approvals WHERE message_id = %s", (mid,)).fetchone()["token"]
    raw = b"In-Reply-To: <atlas-approval-1@a>\r\nReferences: <orig@x> <atlas-recap-2@a>\r\n\r\nOK\r\n"
    approval = conn.execute("SELECT id FROM synedre.approvals WHERE message_id = %s", (mid,)).fetchone()["id"]
    assert decisions.thread_of(conn, raw) == decisions.Thread(mid, "approval", token, approval)
    raw = b"References: <orig@x> <atlas-approval-1@a> <atlas-recap-2@a>\r\n\r\nOK\r\n"
    assert decisions.thread_of(conn, raw) == decisions.Thread(other, "recap", None)  # the last reference first
    assert decisions.thread_of(conn, b"In-Reply-To: <atlas-alert-2@a>\r\n\r\nOK\r\n") is None  # not a kind we read
    assert decisions.thread_of(conn, b"Subject: x\r\n\r\nOK\r\n") is None


def test_the_fleet_refuses_to_start_with_a_policy_it_cannot_read(tmp_path):
    bad = tmp_path / "policy.toml"
    bad.write_text("[run_plan]\nenabled = 'yes please'\n")
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "fleet"], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env={"PATH": "/usr/bin:/bin", "SYNEDRE_APPROVAL_POLICY_FILE": str(bad),
                                        "SYNEDRE_MAILBOXES_FILE": str(ROOT / "mailboxes.example.toml"),
                                        "SYNEDRE_STATE_DIR": str(tmp_path / "state"),
                                        "ATLAS_IMAP_PASSWORD": "x", "HOME": str(tmp_path)})
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: SYNEDRE_APPROVAL_POLICY_FILE: approval policy ") and "run_plan.enabled" \
        in out.stderr and "Traceback" not in out.stderr
