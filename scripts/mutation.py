"""Mutation testing of the safety-critical code (`make mutation`), then its report.

mutmut (configured in pyproject.toml's [tool.mutmut]) mutates the files that hold the
guarantees; this script runs it on the functions that hold them (SCOPE), with one embedded
PostgreSQL shared by mutmut's many short pytest sessions, and writes docs/mutation.md:
mutants per area, killed, survived — each survivor either listed in
docs/mutation-equivalent.toml with why it cannot change behaviour (or, in its `race` table,
why no deterministic test reaches it), or unexplained. It
exits 1 when a survivor is unexplained (or a mutant had no test), 0 otherwise.

    make mutation                                          # its venv, a run, the report
    build/mutvenv/bin/python scripts/mutation.py --report  # report on the last run only
    build/mutvenv/bin/python scripts/mutation.py --retest-survivors  # after adding tests
    build/mutvenv/bin/python scripts/mutation.py --area approval     # one area (its own report)
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = [sys.executable, "-m", "mutmut"]
EQUIVALENT = ROOT / "docs" / "mutation-equivalent.toml"
REPORT = ROOT / "docs" / "mutation.md"

# Area -> mutmut name patterns (module path, `x_<function>` or `xǁ<Class>ǁ<method>`).
# `db`: its tests share one database, so its mutants run one at a time.
SCOPE: dict[str, tuple[bool, list[str]]] = {
    "guard rails (classify/rules.py)": (False, ["synedre.classify.rules.*"]),
    "launch verdict (stages/spawn/verdict.py: succeeded)": (False, [
        "synedre.stages.spawn.verdict.x_succeeded__mutmut_*"]),
    "redactor (redact/: Redactor, exact pass)": (False, ["synedre.redact.xǁRedactorǁ*",
                                                         "synedre.redact.exact.xǁ_Exactǁ*"]),
    "merge and fetch-back (spawn/workspace.py)": (False, [
        f"synedre.spawn.workspace.x_{f}__mutmut_*" for f in ("collect", "merge_back", "_dirty")]),
    "claim and fenced writes (runner/)": (True, [
        *(f"synedre.runner.doors.x_{f}__mutmut_*" for f in (
            "claim", "look", "write", "release", "renew", "_check_exit", "move", "hold", "claim_launch",
            "finish_launch")),
        *(f"synedre.runner.x_{f}__mutmut_*" for f in ("run", "_take", "settle"))]),
    "recap's exactly-once send (mail/outbox.py)": (True, [
        f"synedre.mail.outbox.x_{f}__mutmut_*" for f in (
            "claim", "claim_send", "mark_sent", "mark_unknown", "release")]),
    "approval consumption (approvals/decisions.py)": (True, [
        f"synedre.approvals.decisions.x_{f}__mutmut_*" for f in (
            "verdict_of", "judge", "thread_of", "replied_ids", "asks", "ask_launch", "decide", "why_closed",
            "expired",
            "record_verdict")]),
}
KILLED = {"killed", "timeout", "segfault"}  # a mutant the tests noticed
STATUS = re.compile(r"^\s*(\S+__mutmut_\d+): (.+)$")


def area_of(name: str) -> str | None:
    for area, (_, patterns) in SCOPE.items():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return area
    return None


def shared_postgres(base: Path) -> tuple[object, str]:
    sys.path.insert(0, str(ROOT))
    from tests.services import stack

    server = stack.start_pg(base / "data")
    return server, server.get_uri()


def run(children: int, log: Path) -> float:
    started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still stop the server below
    with tempfile.TemporaryDirectory(prefix="synedre-mutation-") as tmp:
        server, url = shared_postgres(Path(tmp))
        # Its own directory for pytest's numbered temporary directories (pytest-of-<user>, the
        # user read from LOGNAME): mutmut starts thousands of sessions, and pytest prunes all but
        # the last few, which would take other sessions' directories from under them. Not a
        # longer root: Dovecot's sockets in a test's directory must stay under 108 bytes.
        env = {**os.environ, "SYNEDRE_TEST_SHARED_PG_URL": url, "LOGNAME": "mut", "USER": "mut"}
        try:
            with log.open("w") as out:
                for db in (False, True):
                    patterns = [p for _, (d, ps) in SCOPE.items() if d is db for p in ps]
                    cmd = [*MUTMUT, "run", "--max-children", "1" if db else str(children), *patterns]
                    rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
                    if rc not in (0, 1):  # mutmut exits 1 when mutants survive
                        sys.exit(f"mutmut failed (exit {rc}); see {log}")
        finally:
            server.cleanup()  # type: ignore[attr-defined]
    return time.monotonic() - started


def forget_survivors() -> int:
    """Mark the surviving mutants of SCOPE untested, so that the next run tests them again
    against the tests as they are now (mutmut re-tests a mutant only when its function
    changed). Killed mutants stay killed: tests are only ever added."""
    count = 0
    for meta in (ROOT / "mutants").rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        for name, code in codes.items():
            if code in (0, 5, 33) and area_of(name) is not None:  # survived (0), or no test (5, 33)
                codes[name], count = None, count + 1
        meta.write_text(json.dumps(data, indent=4))
    return count


def results() -> dict[str, str]:
    out = subprocess.run([*MUTMUT, "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return {m.group(1): m.group(2).strip() for line in out.splitlines() if (m := STATUS.match(line))}


def diff(name: str) -> str:
    shown = subprocess.run([*MUTMUT, "show", name], cwd=ROOT, capture_output=True, text=True).stdout
    return "\n".join(line for line in shown.splitlines() if line[:2] in ("- ", "+ "))


def mechanical(changed: str) -> str | None:
    """Why a mutant is equivalent when that can be read off its diff alone, else None:
    - it touches nothing but the arguments of a logging call (the event's name or fields):
      what an operator reads, never a state, a return value or a write;
    - it changes only the letter case of SQL text holding no quoted literal: keywords and
      unquoted identifiers are case-insensitive in PostgreSQL."""
    lines = changed.splitlines()
    if lines and all(LOG_CALL.match(line[2:]) for line in lines):
        return f"changes a log line only, no state or result: `{lines[-1][2:].strip()}`"
    old = [line[2:] for line in lines if line.startswith("- ")]
    new = [line[2:] for line in lines if line.startswith("+ ")]
    if old and len(old) == len(new) and old != new and all(
            a.lower() == b.lower() and "'" not in a and QUOTED.sub("", a) == QUOTED.sub("", b)
            and SQL.search(" ".join(QUOTED.findall(a))) for a, b in zip(old, new, strict=True)):
        return "changes the letter case of SQL keywords only (no quoted literal on the line)"
    return None


QUOTED = re.compile(r'"[^"]*"')  # the Python string literals of a line (SQL text is in them)
SQL = re.compile(r"(?i)\b(?:update|select|where|returning|insert|set|and|null)\b")


LOG_CALL = re.compile(r"\s*log\.(?:debug|info|warning|error|exception)\(.*\)\s*(?:#.*)?$")


def report(seconds: float | None) -> int:
    listed = tomllib.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else {}
    equivalent: dict[str, str] = {**listed.get("equivalent", {}),
                                  **{n: f"reached only in a race: {why}" for n, why in listed.get("race", {}).items()}}
    per: dict[str, Counter[str]] = {a: Counter() for a in SCOPE}
    explained, unexplained = [], []
    for name, status in sorted(results().items()):
        if (area := area_of(name)) is None or status == "not checked":
            continue
        per[area]["mutants"] += 1
        if status in KILLED:
            per[area]["killed"] += 1
        elif status == "survived" and name in equivalent:
            per[area]["equivalent"] += 1
            explained.append((name, equivalent[name]))
        elif status == "survived" and (why := mechanical(diff(name))):
            per[area]["equivalent"] += 1
            explained.append((name, why))
        else:
            per[area]["unexplained"] += 1
            unexplained.append((name, status))
    lines = ["# Mutation testing of the safety-critical code", "",
             "Written by `make mutation` (scripts/mutation.py, mutmut configured in pyproject.toml).",
             f"A run of these areas took {seconds / 60:.0f} min here (2 cores)." if seconds else "", "",
             "| area | mutants | killed | survived, explained | survived, unexplained |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {a} | {c['mutants']} | {c['killed']} | {c['equivalent']} | {c['unexplained']} |"
              for a, c in per.items()]
    total = sum(per.values(), Counter())
    lines += [f"| **all** | {total['mutants']} | {total['killed']} | {total['equivalent']} | "
              f"{total['unexplained']} |", "",
              "A mutant is killed when a test fails (or times out) with it.", "",
              "## Survivors explained", "",
              "Each cannot change behaviour, or (\"reached only in a race\") is held by a concurrency",
              "test that provokes the race in some runs only.", ""]
    lines += [f"- `{n}`: {why}" for n, why in explained] or ["(none)"]
    lines += ["", "## Unexplained survivors", ""]
    for n, status in unexplained:
        lines += [f"- `{n}` ({status})", "", "```diff", diff(n), "```", ""]
    if not unexplained:
        lines.append("(none)")
    REPORT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[5:5 + len(per) + 3]))
    print(f"report: {REPORT.relative_to(ROOT)}; unexplained survivors: {len(unexplained)}")
    return 1 if unexplained else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="store_true", help="only write the report of the last run")
    ap.add_argument("--children", type=int, default=os.cpu_count() or 1,
                    help="mutants tested at once where the tests share no database")
    ap.add_argument("--retest-survivors", action="store_true",
                    help="test the last run's survivors again (after adding tests), then report")
    ap.add_argument("--area", help="only the areas whose name holds this text (their report goes to "
                                   "docs/mutation-<text>.md; the full report stays the last full run's)")
    a = ap.parse_args()
    global REPORT
    if a.area:
        for name in [n for n in SCOPE if a.area not in n]:
            del SCOPE[name]
        if not SCOPE:
            sys.exit(f"no area holds {a.area!r}")
        REPORT = ROOT / "docs" / f"mutation-{re.sub(r'[^a-z0-9]+', '-', a.area.lower()).strip('-')}.md"
    if a.retest_survivors:
        print(f"re-testing {forget_survivors()} survivors")
    # the last full run's time (or that area's), kept with its results
    took = ROOT / "mutants" / ("run-seconds" + (f"-{REPORT.stem}" if a.area else ""))
    if not a.report:
        seconds = run(a.children, ROOT / "build" / "mutation.log")
        if not a.retest_survivors:
            took.write_text(f"{seconds:.0f}\n")
    return report(float(took.read_text()) if took.exists() else None)


if __name__ == "__main__":
    sys.exit(main())
