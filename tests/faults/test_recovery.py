"""Recovery from the faults of SPEC §12b through the real fleet (`python -m synedre.cli
fleet`: beat, every worker group, the IDLE watcher, the embedded PostgreSQL it owns).

Each test drains MESSAGES (60: enough that the fault lands mid-drain with messages waiting on
the LLM, few enough to keep the suite short; bench/recovery.py drains `harness.N_MESSAGES`,
200, and prints the timings) unique messages appended by IMAP to a throwaway Dovecot, scanned by a real
clamd and classified by a scripted Mistral API answering in `harness.LLM_DELAY_S` (0.3 s),
injects its fault mid-drain (while messages wait on the LLM), and then counts from
PostgreSQL: every message terminal (or `materialized`: launches are disabled) within
`harness.RECOVERY_TARGET_S` (60 s) of the fault's end, as many raw rows as messages
delivered, one state row each, each once-only audit event once per message, one
materialization per materialized message, and at most one extra LLM call per message,
only for one whose first call the fault cut off. Machinery: tests/faults/harness.py (also
run by bench/recovery.py, which prints the figures).
"""
from __future__ import annotations

import os

import pytest

from tests.faults import harness

MESSAGES = 60

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


def assert_recovered(out: harness.Outcome) -> None:
    why = out.explain()
    print(out.line())
    assert out.unexpected_prompts == 0, why
    assert out.not_done == {}, f"messages not terminal {harness.RECOVERY_TARGET_S + harness.OVERTIME_S:.0f} s " \
                               f"after the fault's end:\n{why}"
    assert out.recovered_s is not None and out.recovered_s < harness.RECOVERY_TARGET_S, why
    # nothing lost
    assert out.lost == 0 and out.raw_rows == out.delivered, why
    assert out.state_rows == out.raw_rows, why
    # nothing duplicated
    assert out.duplicated == 0, why
    assert out.once_event_duplicates == {}, why
    assert out.audit.get("poll_inserted") == out.delivered, why
    assert out.materializations == out.materialized_states == out.statuses.get("materialized"), why
    # each message where its answer sends it, classified by the LLM, no paid call repeated
    # except one the fault cut off
    assert out.statuses == harness.expected_statuses(set(range(out.delivered))), why
    assert set(out.llm_calls_per_message) == set(range(out.delivered)), why
    assert out.extra_llm_outside_fault == [], why
    assert max(out.llm_calls_per_message.values()) <= 2, why
    assert out.extra_llm_calls <= out.in_flight_at_fault, why


def test_redis_killed_mid_drain_and_restarted_empty_loses_and_duplicates_nothing(fault_stack):
    """Redis SIGKILLed mid-drain, started again empty `harness.REDIS_OUTAGE_S` later; 15 of
    the messages reach the mailbox during the outage (the epoch-lost sweep polls for them)."""
    assert_recovered(harness.redis_restart_empty(fault_stack, n=MESSAGES, late=15))


def test_embedded_postgres_killed_mid_drain_is_restarted_by_the_fleet_and_nothing_is_lost(fault_stack):
    """The postmaster of the fleet's own embedded PostgreSQL SIGKILLed mid-drain (the fleet
    runs without SYNEDRE_DATABASE_URL); the fleet's watchdog must start it again."""
    assert "SYNEDRE_DATABASE_URL" not in fault_stack.env
    out = harness.postgres_kill(fault_stack, n=MESSAGES)
    assert "embedded_database_restarted" in fault_stack.fleet.output()
    assert_recovered(out)


def test_five_random_worker_kills_during_a_drain_lose_and_duplicate_nothing(fault_stack):
    """Five SIGKILLs 3 s apart, each of a worker process (main or pool child) of the
    ingest, read or classify group drawn at random (FAULTS_SEED picks the draw); half the
    messages arrive during the kills. Counted from the last kill."""
    out = harness.worker_kills(fault_stack, n=MESSAGES, seed=int(os.environ.get("FAULTS_SEED", "4")))
    assert_recovered(out)
