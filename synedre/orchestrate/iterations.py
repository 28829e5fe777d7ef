"""Iteration after a failed deploy or QA (SPEC §9.4): the budget, the escalation, and the
brief the next launch gets (previous commits, deploy log, QA errors, iso figures with the
difference in words and its diff image copied into the agent's clone, and the previous
run's transcript compacted by `orchestrate/compaction.py`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synedre.config import Settings
from synedre.db import proofs
from synedre.orchestrate import compaction, iso
from synedre.pipeline import QaCheckStatus

BRIEF_TRANSCRIPT_CHARS = 20000
DEPLOY_LOG_LINES = 60


@dataclass(frozen=True)
class Budget:
    done: int  # launches so far
    limit: int  # the budget that applies: generic, or iso-only
    only_iso: bool
    reasons: list[str]

    @property
    def escalate(self) -> bool:
        return self.done >= self.limit

    @property
    def next(self) -> int:
        return self.done + 1


def budget(conn: Any, message_id: int, s: Settings) -> Budget:
    done = conn.execute("SELECT count(*) AS n FROM synedre.launches WHERE message_id = %s",
                        (message_id,)).fetchone()["n"]
    run = conn.execute("SELECT id, deploy_ok, only_iso_mismatch FROM synedre.qa_runs WHERE message_id = %s"
                       " ORDER BY id DESC LIMIT 1", (message_id,)).fetchone()
    only_iso = bool(run and run["only_iso_mismatch"])
    reasons = [] if run is None else sorted({r for (r,) in (
        (x,) for c in conn.execute("SELECT reasons FROM synedre.qa_checks WHERE qa_run_id = %s", (run["id"],))
        for x in c["reasons"])})
    if run is not None and run["deploy_ok"] is False:
        reasons = ["deploy_failed", *reasons]
    return Budget(done, s.max_iso_iterations if only_iso else s.max_iterations, only_iso, reasons)


# Where the next launch finds the previous run's mock-up diff images: in its own clone (the
# sandboxed agent reads nothing of the fleet's state directory, which may be on another host),
# in a directory its git never commits (synedre/spawn/workspace.py excludes it).
DIFF_DIR = ".synedre-qa"


@dataclass(frozen=True)
class Brief:
    """The iteration prompt's text and the files the launch puts in its clone for it
    (workspace-relative path, bytes)."""
    text: str
    files: tuple[tuple[str, bytes], ...] = ()


def _diff_image(conn: Any, check: dict[str, Any]) -> bytes | None:
    """The check's diff image from the proofs (QA may have run on another host), if any."""
    try:
        path = proofs.readable(conn, check["diff_proof"], check["diff_image"], "diff.png")
        return Path(path).read_bytes() if path else None
    except (OSError, proofs.ProofError):
        return None


def _iso_lines(conn: Any, c: dict[str, Any], files: list[tuple[str, bytes]]) -> list[str]:
    i = c["detail"]["iso"]
    lines = [f"  mock-up conformity: {i['mismatch_ratio']:.1%} of pixels differ (threshold {i['threshold']:.1%}); "
             f"{iso.describe(i)}"]
    data = _diff_image(conn, c)
    if data is None:
        return [*lines, "  (the diff image could not be provided: the words above are all there is)"]
    name = f"{DIFF_DIR}/check-{c['id']}.diff.png"
    files.append((name, data))
    return [*lines, f"  the diff image is {name} in your workspace (never commit it): your page faded,"
                    f" the pixels unlike the mock-up in red"]


def brief(conn: Any, message_id: int, before: int | None = None) -> Brief:
    """What the previous run did and how its checks failed, for the iteration prompt: the
    message's last launch, or its last before the attempt `before` (the launch being claimed)."""
    launch = conn.execute("SELECT id, iteration, contract, salvage FROM synedre.launches WHERE message_id = %s"
                          " AND (%s::int IS NULL OR attempt < %s) ORDER BY attempt DESC LIMIT 1",
                          (message_id, before, before)).fetchone()
    run = conn.execute("SELECT * FROM synedre.qa_runs WHERE launch_id = %s", (launch["id"],)).fetchone()
    out = [f"Iteration {launch['iteration']} failed its checks."]
    files: list[tuple[str, bytes]] = []
    commits = (launch["contract"] or {}).get("commits") or (launch["salvage"] or {}).get("commits") or []
    out.append("Your commits: " + (", ".join(map(str, commits)) if commits else "none recorded"))
    if run is not None and not run["deploy_ok"]:
        tail = "\n".join((run["deploy_log"] or "").splitlines()[-DEPLOY_LOG_LINES:])
        out.append(f"The deploy (./deploy {run['target']} --preprod) failed, exit {run['deploy_exit_code']}; "
                   f"its log ends with:\n{tail}")
    if run is not None:
        for c in conn.execute("SELECT * FROM synedre.qa_checks WHERE qa_run_id = %s AND status = %s"
                              " ORDER BY id", (run["id"], str(QaCheckStatus.FAILED))):
            d = c["detail"] or {}
            routes = c["routes"] or [c["declared"]]
            lines = [f"Route {', '.join(routes)}" + (f" (checked as {c['resolved']})" if c["resolved"] and
                                                    routes != [c["resolved"]] else "")
                     + f": {', '.join(c['reasons'])}" + (f", HTTP {c['http_status']}" if c["http_status"] else "")]
            lines += [f"  page error: {e}" for e in d.get("page_errors", [])[:10]]
            lines += [f"  console error: {e}" for e in d.get("console_errors", [])[:10]]
            lines += [f"  failed request: {e}" for e in d.get("failed_requests", [])[:10]]
            if d.get("error"):
                lines.append(f"  {d['error']}")
            if "iso" in d:
                lines += _iso_lines(conn, c, files)
            out.append("\n".join(lines))
    events = [r["payload"] for r in conn.execute(
        "SELECT payload FROM synedre.launch_events WHERE launch_id = %s ORDER BY seq", (launch["id"],))]
    transcript = compaction.render(compaction.compact(events))
    if len(transcript) > BRIEF_TRANSCRIPT_CHARS:
        transcript = "[... start omitted ...]\n" + transcript[-BRIEF_TRANSCRIPT_CHARS:]
    out.append("Your previous run, compacted:\n" + transcript)
    return Brief("\n\n".join(out), tuple(files))


def summary(conn: Any, message_id: int) -> dict[str, Any]:
    """The QA verdict per route of the last run, for the recap and the alerts."""
    run = conn.execute("SELECT * FROM synedre.qa_runs WHERE message_id = %s ORDER BY id DESC LIMIT 1",
                       (message_id,)).fetchone()
    if run is None:
        return {"deployed": False, "routes": []}
    routes = [{"route": c["declared"], "routes": c["routes"] or [c["declared"]], "resolved": c["resolved"],
               "status": c["status"], "reasons": c["reasons"],
               "http_status": c["http_status"],
               # files on this host, from the proofs QA stored (it may have run on another host)
               "screenshot": proofs.readable(conn, c["screenshot_proof"], c["screenshot"], "screenshot.png"),
               "diff_image": proofs.readable(conn, c["diff_proof"], c["diff_image"], "diff.png"),
               "detail": json.loads(json.dumps(c["detail"]))}
              for c in conn.execute("SELECT * FROM synedre.qa_checks WHERE qa_run_id = %s ORDER BY id", (run["id"],))]
    return {"deployed": bool(run["deploy_ok"]), "target": run["target"], "iteration": run["iteration"],
            "verdict": run["verdict"], "deploy_log": run["deploy_log"], "deploy_exit_code": run["deploy_exit_code"],
            "routes": routes}
