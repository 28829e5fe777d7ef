"""Recovery after a fault, from a plain shell: `cd bench && ../.venv/bin/python recovery.py`.

For each case of the fault suite (tests/faults/test_recovery.py, same machinery in
tests/faults/harness.py) it drains 200 unique messages through the real fleet (its own
redis-server on a free loopback port, an embedded PostgreSQL under a temporary state dir,
a throwaway Dovecot and clamd, a scripted Mistral API answering in 300 ms), injects the
fault mid-drain and prints the time from the fault's end to the last message terminal:

- redis_restart_empty: Redis SIGKILLed, started again empty 10 s later (mail arrives meanwhile);
- postgres_kill: the embedded PostgreSQL's postmaster SIGKILLed; the fleet restarts it;
- worker_kills: five worker processes SIGKILLed at random, 3 s apart.

The target (SPEC §12b) is under 60 s, with nothing lost or duplicated.

The baseline, in the same run just before each case: the same drain without the fault, on
a stack of its own (the same deliveries at the same moments, the same mid-drain point,
where the fault would have begun), timed from that point to the last message terminal.
The ratio is the fault case's time from the fault's start to the last message terminal
(the fault itself, then the recovery) over that baseline: how much longer the rest of the
drain took because of the fault.
"""
from __future__ import annotations

import argparse
import inspect
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults import harness  # noqa: E402
from tests.services.clamd import start_clamd  # noqa: E402
from tests.services.dovecot import start_dovecot  # noqa: E402


def default(scenario: Callable, name: str):
    """A scenario's own default for one of its parameters (the harness keeps them there)."""
    return inspect.signature(scenario).parameters[name].default


def no_fault(case: str, st: harness.Stack, n: int) -> harness.Outcome:
    """The case's drain with its deliveries and its mid-drain point, and no fault there.
    The outcome's fault start and end are both that point."""
    if case == "redis_restart_empty":
        late = default(harness.redis_restart_empty, "late")
        st.deliver(range(n - late))
        st.start_fleet()
        st.wait_mid_drain((n - late) // 5)
        flying = harness.in_flight(st) + late
        at = st.mark("where redis would be killed")
        st.deliver(range(n - late, n))
    elif case == "postgres_kill":
        st.deliver(range(n))
        st.start_fleet()
        st.wait_mid_drain(n // 5)
        flying = harness.in_flight(st)
        at = st.mark("where postgres would be killed")
    elif case == "worker_kills":
        kills, every_s = default(harness.worker_kills, "kills"), default(harness.worker_kills, "every_s")
        first = n // 2
        st.deliver(range(first))
        st.start_fleet()
        st.wait_mid_drain(first // 5)
        flying = harness.in_flight(st) + n - first
        at = st.mark("where the kills would begin")
        st.deliver(range(first, n), (kills - 1) * every_s / (n - first))  # the scenario's pace
    else:
        raise ValueError(case)
    st.wait_all_done(at)
    st.mark("drain over")
    return harness.collect(st, case, at, at, flying)


def run(case: str, base: Path, clamd_socket: str, n: int, seed: int, fault: bool) -> harness.Outcome:
    where = base / (case if fault else f"{case}-no-fault")
    dovecot = start_dovecot(where / "dovecot")
    try:
        with harness.open_stack(where, dovecot, clamd_socket) as st:
            if fault:
                kwargs = {"seed": seed} if case == "worker_kills" else {}
                out = harness.SCENARIOS[case](st, n=n, **kwargs)
            else:
                out = no_fault(case, st, n)
            for at, what in st.timeline:
                print(f"#   {at - st.timeline[0][0]:7.1f}s {what}", file=sys.stderr)
            return out
    finally:
        dovecot.stop()


def clean(out: harness.Outcome) -> bool:
    return out.lost == 0 and out.duplicated == 0 and not out.once_event_duplicates and not out.not_done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", choices=list(harness.SCENARIOS),
                    help="run only this case (repeatable); default: all three")
    ap.add_argument("-n", type=int, default=harness.N_MESSAGES, help="messages per case")
    ap.add_argument("--seed", type=int, default=4, help="which workers worker_kills picks")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, databases)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="synedre-recovery-"))
    clamd = start_clamd(base / "clamd")
    ok = True
    try:
        for case in args.case or list(harness.SCENARIOS):
            t0 = time.monotonic()
            calm = run(case, base, str(clamd.socket_path), args.n, args.seed, fault=False)
            baseline_s = calm.recovered_s
            print(f"recovery baseline case={case} no_fault_s={'never' if baseline_s is None else f'{baseline_s:.1f}'}"
                  f" msgs={calm.delivered} lost={calm.lost} duplicated={calm.duplicated}"
                  f" not_terminal={len(calm.not_done)} (the same drain without the fault, from where it would"
                  f" begin to the last message terminal)", flush=True)
            out = run(case, base, str(clamd.socket_path), args.n, args.seed, fault=True)
            from_fault = None if out.last_done_at is None or out.not_done else out.last_done_at - out.fault_start
            ratio = f"{from_fault / baseline_s:.2f}" if from_fault is not None and baseline_s else "n/a"
            print(f"{out.line()} from_fault_s={'never' if from_fault is None else f'{from_fault:.1f}'}"
                  f" fault_s={out.fault_end - out.fault_start:.1f} ratio={ratio} (from the fault's start, over the"
                  f" baseline) case_wall_s={time.monotonic() - t0:.0f}", flush=True)
            good = (out.recovered_s is not None and out.recovered_s < harness.RECOVERY_TARGET_S and out.lost == 0
                    and out.duplicated == 0 and not out.once_event_duplicates and not out.extra_llm_outside_fault)
            if not clean(calm):
                ok = False
                print(f"# {case} without the fault: {calm.explain()}", file=sys.stderr)
            if not good:
                ok = False
                print(f"# {case}: {out.explain()}", file=sys.stderr)
    finally:
        clamd.stop()
        if ok and not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"# logs and databases kept in {base}", file=sys.stderr)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
