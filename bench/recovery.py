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
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults import harness  # noqa: E402
from tests.services.clamd import start_clamd  # noqa: E402
from tests.services.dovecot import start_dovecot  # noqa: E402


def run(case: str, base: Path, clamd_socket: str, n: int, seed: int) -> harness.Outcome:
    dovecot = start_dovecot(base / case / "dovecot")
    try:
        with harness.open_stack(base / case, dovecot, clamd_socket) as st:
            kwargs = {"seed": seed} if case == "worker_kills" else {}
            out = harness.SCENARIOS[case](st, n=n, **kwargs)
            for at, what in st.timeline:
                print(f"#   {at - st.timeline[0][0]:7.1f}s {what}", file=sys.stderr)
            return out
    finally:
        dovecot.stop()


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
            out = run(case, base, str(clamd.socket_path), args.n, args.seed)
            print(out.line(), flush=True)
            good = (out.recovered_s is not None and out.recovered_s < harness.RECOVERY_TARGET_S and out.lost == 0
                    and out.duplicated == 0 and not out.once_event_duplicates and not out.extra_llm_outside_fault)
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
