"""Launches across faults (SPEC §8, §12b): the real fleet (`python -m synedre.cli fleet`)
with launches on, plus a second spawn worker as during a rolling deploy, so that the pools
could run twice the cap and only the fleet-wide guards hold it (Redis's semaphore, and
PostgreSQL's count of the launches running, which outlives a Redis restarted empty).

`harness.N_LAUNCHES` messages become `run` launches; each agent is the real `claude` CLI
under a pty, against a scripted Messages API that keeps it working (streaming events) about
`harness.AGENT_WORK_S`, so that `harness.LAUNCH_LIMIT` run while the others wait for a
slot. The fault lands then, and everything is counted from outside the fleet:

- no message launched twice: its launch rows (PostgreSQL), and independently the agent
  conversations the scripted API saw for it (sessions and opening requests) and the agent
  processes started for it (psutil);
- the cap never exceeded: the live agent CLIs of the fleet, sampled every
  `harness.SAMPLE_EVERY_S`; the peak is printed;
- no slot leaked: after the fault the next agent starts within
  `harness.NEXT_LAUNCH_BOUND_S` (the slots' lease plus the sweep's period, from the code's
  constants) of the fault's end, and of the first agent to end after it; every queued
  message is launched, and no slot or lock is left in Redis;
- every launch row terminal and its verdict written once, every message terminal too, the
  founder told of each once (its recap, or its alert).

The fleet runs with its launch locks' lifetime and its sweep period shortened
(`harness.LOCK_TTL_S` 15 s, `harness.SWEEP_EVERY_S` 5 s, through their settings), so each agent
works about 10 s. Measured alone on the 2-core machine: the Redis case 39 s, the PostgreSQL case
46 s (peak 3, 0 double, 6/6 terminal, the next agent 4.7 and 12.8 s after the fault's end). With
a 20 s lifetime: the Redis case 45 s, peak 3 agents, 0 double launches, 6/6 rows terminal (the 3
running at the fault stopped `interrupted` at their next renewal, the 3 queued succeeded), the
next agent 4.5 s after Redis answered again; the PostgreSQL case 51 s, peak 3, 0 double, 6/6
succeeded, the next agent 15 s after the restart, 3.5 s after the first running one finished.
With a 30 s lifetime the same cases took 83 and 69 s, with the defaults (60 s, 15 s) 110-146 s.
Before the product fixes made with this suite, the Redis case failed in each run tried: 4 agents
at once, the running launches failed twice, queued ones interrupted at once in a worker whose
earlier launch had lost its lock.

Machinery: tests/faults/harness.py. Run with `-s` to see the figures.
"""
from __future__ import annotations

import shutil

import pytest

from synedre.pipeline import TERMINAL
from tests.faults import harness

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed "
                                 "(scripts/install-claude-cli)")]


@pytest.fixture
def launch_stack(tmp_path, dovecot, clamd):
    with harness.open_stack(tmp_path / "stack", dovecot, str(clamd.socket_path), launches=True) as st:
        yield st
        (tmp_path / "stack" / "timeline.txt").write_text(
            "".join(f"{at - st.timeline[0][0]:7.1f}s {what}\n" for at, what in st.timeline) if st.timeline else "")


def assert_launched_once_within_the_cap(out: harness.LaunchOutcome) -> None:
    why = out.explain()
    print(out.line())
    everyone = list(range(out.messages))
    # the fault landed as meant: the cap reached, launches waiting
    assert len(out.running_at_fault) == harness.LAUNCH_LIMIT and out.queued_at_fault, why
    assert out.sampler_errors == [] and out.max_gap_s < 2.0, why  # the sampler saw all along
    # no message launched twice, by three independent counts, and each launch ended once
    assert out.double_launches == {}, why
    assert out.unattributed == 0, why
    assert out.finishes == {n: 1 for n in everyone}, why
    # the fleet-wide cap, sampled from outside
    assert out.peak <= harness.LAUNCH_LIMIT, why
    # every message launched (those queued at the fault too), every launch row terminal
    assert sorted(out.rows) == everyone, why
    assert out.terminal_rows == out.total_rows == out.messages, why
    for n in out.queued_at_fault:  # their agents really ran, once
        assert out.processes.get(n) == 1 and len(out.talks[n].sessions) == 1, why
    # no slot leaked: the next launch within the sweep's bound, nothing left taken
    assert out.next_launch_s is not None and out.next_launch_s <= harness.NEXT_LAUNCH_BOUND_S, why
    assert out.handover_s is not None and out.handover_s <= harness.NEXT_LAUNCH_BOUND_S, why
    assert (out.slots_left, out.locks_left) == (0, 0), why
    # every message ended, and the founder heard of each once (its recap, or its alert)
    assert out.settled_at is not None, why
    assert all(out.statuses.get(n) in TERMINAL for n in everyone), why
    assert out.mails == {n: 1 for n in everyone}, why
    assert max(out.drafts.values(), default=0) <= 1, why  # a recap's paid draft never asked twice


def test_redis_restarted_empty_with_launches_running_and_queued_launches_each_once_within_the_cap(launch_stack):
    """Redis SIGKILLed just after the three running launches renewed their guards, while the
    other messages wait for a slot; started again empty `harness.LAUNCH_REDIS_OUTAGE_S` later
    (the locks, the slots and the queued tasks are gone), and the sweep runs at once. The
    running launches hold nothing in Redis until their next renewal finds that out and stops
    them; until then, the waiting launches must not start (PostgreSQL still counts the
    running ones) nor the running ones be taken for lost."""
    out = harness.launches_redis_restart_empty(launch_stack)
    assert_launched_once_within_the_cap(out)
    stopped = {n: [r["stop_reason"] for r in out.rows[n]] for n in out.running_at_fault}
    assert stopped == {n: ["interrupted"] for n in out.running_at_fault}, out.explain()  # their guards were gone


def test_embedded_postgres_killed_with_launches_running_and_queued_launches_each_once_within_the_cap(
        launch_stack):
    """The postmaster of the fleet's embedded PostgreSQL SIGKILLed while three agents work
    (their events written as they come) and the other messages wait for a slot; the fleet's
    watchdog starts it again."""
    out = harness.launches_postgres_kill(launch_stack)
    assert "embedded_database_restarted" in launch_stack.fleet.output()
    assert_launched_once_within_the_cap(out)
