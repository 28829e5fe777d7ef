"""Latency of the whole path, one message at a time: APPEND -> the agent started (its CLI's
first request to the Anthropic API), and the agent's end -> the recap received by the
founder's SMTP server, p50 and p95 over 20 messages. Targets: under 5 s to the agent, under
15 s to the recap. Baseline: the IDLE floor, the time the IMAP server takes to tell a bare
IDLE connection that a message arrived (nothing else: no fleet in between), sampled once
before each timed message in this run, on a folder of its own; the ratio of the path to
the agent over it is printed (p50 over p50, p95 over p95).

The product's path, on real services: Dovecot, the IDLE watcher (`synedre idle`), one
Celery process per worker group of synedre.pipeline.WORKER_GROUPS started as `synedre
fleet` starts them (synedre.fleet.worker_argv / worker_env; no beat: nothing on this path
waits for it), a scripted LLM answering at once (tests/services/llm_server.py: every
classification says run + plan), the real `claude` CLI against the scripted Messages API
(tests/services/claude_api.py: one Bash step commits a file and writes the contract with
3 routes, then a closing text), the e2e fixture's site (tests/services/site.py: its
`deploy` script publishes the trunk), Chromium for QA, aiosmtpd for the recap.

Times: APPEND is taken here, just before the IMAP APPEND; the agent's start is the first
request the scripted Anthropic API (served by this process) receives after it: the CLI
is running then, whatever it asks first (printed beside it: the launch row's `started_at`,
written at the claim, and the CLI's own start, from the spawn worker's `spawn_started`
log line, written just before the CLI is spawned, to that request); the agent's end is the
launch row's `ended_at` (process gone, contract read, branch merged); the recap is
received when aiosmtpd has its DATA. One message at a time: the next is appended once the previous
recap is received, so no message waits behind another (`--pace agent`: once the previous
agent has ended, so the previous message's deploy, QA and recap run beside the next
agent; on 2 cores that saturates the QA group). An untimed message goes first (first CLI
run, first Chromium, lazy imports). Runs from a plain shell: see _stack.py, _loop.py.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from email import message_from_bytes, policy
from pathlib import Path

import psycopg
from _loop import CORPUS, add_client, pct, services, stack
from _stack import IdleFloor, all_ready

from synedre import fleet
from synedre.celeryconfig import GROUPS
from synedre.pipeline import TERMINAL, Status
from tests.services.claude_api import ClaudeAPI, ScriptedModel, bash, start_claude_api, text
from tests.services.llm_server import start_llm_server
from tests.services.site import start_site
from tests.services.smtp import start_smtp

MESSAGES = 20
ROUTES = ["/", "/contact", "/about"]
CLASSIFICATION = json.dumps({"intent": "run", "complexity": "plan", "confidence": 0.9, "rationale": "bench"})
BASE = (CORPUS / "cases" / "P21-founder-forward-run-plan.eml").read_bytes()
PER_MESSAGE_TIMEOUT_S = 180
DRAFT = "Bonjour, la modification est en ligne. Julien"  # no quote: it goes in a quoted shell word


def classification(body, path):
    return CLASSIFICATION if path == "/v1/chat/completions" else None  # embeddings: the default vectors


def agent_script() -> ScriptedModel:
    """One Bash step: a commit of a file of its own (no merge conflicts between launches)
    and the contract naming it; then the closing text."""
    contract = {"ok": True, "tenant": "acme", "routes_to_qa": ROUTES, "commits": ["__SHA__"],
                "summary_md": "Fait.", "draft_reply_for_user": DRAFT}
    js = json.dumps(contract).replace('"__SHA__"', '"\'"$(git rev-parse --short HEAD)"\'"')
    step = ("mkdir -p site/changes && f=site/changes/$(date +%s%N).txt && date > \"$f\" && git add \"$f\""
            " && git commit -qm 'bench change' && "
            f"printf '%s' '{js}' > \"$SYNEDRE_CONTRACT_PATH\"")
    return ScriptedModel([[bash(step)], [text("Done.")]])


def message(i: int, tag: str) -> tuple[bytes, str]:
    mid = f"<bench-lat-{tag}-{i}@synedre.test>"
    raw = re.sub(rb"(?im)^Message-ID:.*\r?\n", b"", BASE)
    return f"Message-ID: {mid}\r\n".encode() + raw, mid


def stamp_arrivals(sink) -> dict[str, float]:
    """In-Reply-To of each mail the sink takes -> when its DATA was complete (time.time())."""
    arrivals: dict[str, float] = {}
    original = sink.handle_DATA

    async def handle_DATA(server, session, envelope):  # noqa: N802 - aiosmtpd's hook name
        reply = await original(server, session, envelope)
        at = time.time()
        msg = message_from_bytes(bytes(envelope.content), policy=policy.default)
        arrivals.setdefault(str(msg.get("In-Reply-To", "")).strip(), at)
        return reply
    sink.handle_DATA = handle_DATA  # aiosmtpd reads the hooks off the handler per connection
    return arrivals


class Crashes:
    """Fails fast when a task raised in a worker (rather than waiting out a timeout);
    reads the logs at most once a second."""

    def __init__(self, procs: list[stack.Proc]):
        self.procs, self.checked = procs, 0.0

    def check(self) -> None:
        if time.monotonic() - self.checked < 1.0:
            return
        self.checked = time.monotonic()
        for p in self.procs:
            out = p.output()
            if (at := out.find(" raised unexpected: ")) >= 0:
                raise RuntimeError(f"{p.name}: {out[max(0, at - 200):at + 2000]}\nlog: {p.log}")


def spawn_started(workers: list[stack.Proc]) -> dict[int, float]:
    """message id -> epoch of its first `spawn_started` log line (JSON logs)."""
    out: dict[int, float] = {}
    for w in workers:
        for line in w.output().splitlines():
            if line.startswith("{") and '"spawn_started"' in line:
                rec = json.loads(line)
                at = datetime.fromisoformat(rec["timestamp"]).timestamp()
                out.setdefault(int(rec["message"]), at)
    return out


def start_fleet(env: dict[str, str], logs: Path) -> list[stack.Proc]:
    """One Celery process per process of each worker group, as `synedre fleet` starts them."""
    return all_ready([stack.Proc(f"bench-{name}-{i}", fleet.worker_argv(g, f"bench-{name}-{i}@%h"),
                                 {**env, **fleet.worker_env(g)}, logs)
                      for name, g in GROUPS.items() for i in range(1, g.processes + 1)], 120)


def prepare(s, api: ClaudeAPI, llm, smtp):
    """The client's site, the directory and the fleet's environment on the bench's services."""
    base = Path(s["env"]["SYNEDRE_STATE_DIR"]).parent
    site = start_site(base / "site")
    (base / "smtp").mkdir()  # beside the services' own registry, which sends nowhere
    env = {**s["env"], **stack.mailbox_env(s["dovecot"], base / "smtp", smtp=smtp),
           "SYNEDRE_WORKSPACE_REPO": str(site.repo), "SYNEDRE_WORKSPACE_BASE_BRANCH": "main",
           "SYNEDRE_CLAUDE_BIN": shutil.which("claude"),
           "SYNEDRE_ANTHROPIC_API_KEY": "sk-ant-api03-BENCHONLY0123456789abcdef",
           "SYNEDRE_ANTHROPIC_BASE_URL": api.url, "SYNEDRE_AGENT_IS_SANDBOX": "1",
           "SYNEDRE_IDLE_TIMEOUT_S": "60", "SYNEDRE_LAUNCH_BUDGET_S": "120", "SYNEDRE_QA_TIMEOUT_S": "20",
           "SYNEDRE_MISTRAL_API_KEY": "bench", "SYNEDRE_MISTRAL_SERVER_URL": llm.url,
           "SYNEDRE_LOG_FORMAT": "json"}
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import",
                    str(CORPUS / "directory.json")], env=env, check=True, timeout=120, cwd=stack.ROOT,
                   capture_output=True)
    add_client(s["pg_url"], site)
    return site, env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=MESSAGES)
    ap.add_argument("--pace", choices=("recap", "agent"), default="recap",
                    help="append the next message once the previous recap is received (latency alone), or"
                         " once the previous agent has ended (back to back: QA of one beside the next agent)")
    args = ap.parse_args()
    if shutil.which("claude") is None or not Path("/usr/bin/chromium").exists():
        raise SystemExit("pipeline_latency needs the claude CLI and /usr/bin/chromium")
    llm = start_llm_server(classification)
    api = start_claude_api(agent_script())
    smtp = start_smtp()
    arrivals = stamp_arrivals(smtp)
    procs: list[stack.Proc] = []
    try:
        with services() as s:
            site, env = prepare(s, api, llm, smtp)
            procs = start_fleet(env, s["logs"])
            procs.append(stack.idle_watcher(env, s["logs"]))
            try:
                report(s, procs, api, arrivals, args.n, args.pace)
            finally:
                for p in procs:
                    p.stop()
                site.stop()
    finally:
        smtp.stop()
        api.stop()
        llm.stop()


def report(s, procs: list[stack.Proc], api: ClaudeAPI, arrivals: dict[str, float], n: int, pace: str) -> None:
    db = psycopg.connect(s["pg_url"], autocommit=True)
    imap = s["dovecot"].client()
    appended: dict[str, float] = {}
    ids: dict[str, int] = {}
    crashes = Crashes(procs)

    def launch_ended(header: str):
        crashes.check()
        row = db.execute("SELECT r.id, l.ended_at FROM synedre.raw_messages r LEFT JOIN synedre.launches l"
                         " ON l.message_id = r.id WHERE r.message_id = %s ORDER BY l.attempt DESC NULLS LAST LIMIT 1",
                         (header,)).fetchone()
        if row and row[0] is not None:
            ids[header] = row[0]
            st = db.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (row[0],)).fetchone()
            if st and st[0] in TERMINAL - {Status.ACTIONED}:
                raise RuntimeError(f"message {row[0]} ended at {st[0]}; logs in {s['logs']}")
        return row is not None and row[1] is not None

    messages = [message(0, "warm")] + [message(i, "t") for i in range(1, n + 1)]
    floor = IdleFloor(s["dovecot"], "Floor")
    clock = time.time() - time.monotonic()  # the API server stamps requests with time.monotonic()
    for raw, header in messages:
        floor.sample(raw)  # with --pace recap, nothing else runs then: the previous one is through
        appended[header] = time.time()
        imap.append("INBOX", raw)
        stack.wait_for(lambda h=header: launch_ended(h), PER_MESSAGE_TIMEOUT_S, f"the launch of {header}", 0.05)
        if pace == "recap":
            stack.wait_for(lambda h=header: crashes.check() or h in arrivals, PER_MESSAGE_TIMEOUT_S,
                           f"the recap of {header}", 0.05)
    timed = [h for _, h in messages[1:]]
    mids = [ids[h] for h in timed]

    def statuses() -> dict[int, str]:
        return dict(db.execute("SELECT message_id, status FROM synedre.email_states WHERE message_id = ANY(%s)",
                               (mids,)).fetchall())
    try:  # the recap is received before the stage writes `actioned`
        stack.wait_for(lambda: crashes.check() or (len(arrivals) >= len(messages)
                                                   and set(statuses().values()) == {str(Status.ACTIONED)}),
                       PER_MESSAGE_TIMEOUT_S, "every recap", 0.05)
    except TimeoutError as exc:
        raise RuntimeError(f"{len(arrivals)} recaps, statuses {statuses()}; logs in {s['logs']}") from exc
    imap.logout()
    floor.close()
    rows = {r[0]: r[1:] for r in db.execute(
        "SELECT l.message_id, extract(epoch FROM l.started_at), extract(epoch FROM l.ended_at),"
        " (SELECT extract(epoch FROM max(a.at)) FROM synedre.audit_log a WHERE a.message_id = l.message_id"
        "   AND a.event = 'deployed'),"
        " (SELECT extract(epoch FROM max(a.at)) FROM synedre.audit_log a WHERE a.message_id = l.message_id"
        "   AND a.event = 'qa_passed'),"
        " (SELECT count(*) FROM synedre.launches k WHERE k.message_id = l.message_id)"
        " FROM synedre.launches l WHERE l.message_id = ANY(%s)", (mids,)).fetchall()}
    db.close()
    spawned = spawn_started(procs)
    requests = sorted(r.at + clock for r in list(api.requests))
    to_agent, to_claim, cli_start, agent_s, to_recap, to_deployed, to_qa = [], [], [], [], [], [], []
    for h, mid in zip(timed, mids, strict=True):
        claim_at, ended_at, deployed_at, qa_at, launches = (float(x) for x in rows[mid])
        if launches != 1:
            raise RuntimeError(f"message {mid} had {launches} launches (QA was meant to pass at once)")
        # one launch at a time: the first request after this APPEND is this message's agent's
        started = next((at for at in requests if at >= appended[h]), None)
        if started is None or not spawned[mid] <= started <= ended_at:
            raise RuntimeError(f"message {mid}: no API request between its CLI's spawn and its launch's end")
        to_agent.append(started - appended[h])
        to_claim.append(claim_at - appended[h])
        cli_start.append(started - spawned[mid])
        agent_s.append(ended_at - started)
        to_deployed.append(deployed_at - ended_at)
        to_qa.append(qa_at - ended_at)
        to_recap.append(arrivals[h] - ended_at)

    def p(v):
        return f"p50={pct(v, 50):.2f} p95={pct(v, 95):.2f}"
    base = floor.samples[1:]  # the samples taken before the timed messages
    print(f"pipeline_latency to_agent {p(to_agent)} (target < 5 s) messages={n}"
          f" idle_floor {p(base)} ratio p50={pct(to_agent, 50) / pct(base, 50):.2f}"
          f" p95={pct(to_agent, 95) / pct(base, 95):.2f} (to_agent over the IDLE floor)"
          f" launch_row_started_at {p(to_claim)} cli_start {p(cli_start)}", flush=True)
    print(f"pipeline_latency agent_end_to_recap {p(to_recap)} (target < 15 s) messages={n}"
          f" routes={len(ROUTES)} to_deployed {p(to_deployed)} to_qa_passed {p(to_qa)}"
          f" agent_run_s {p(agent_s)} pace={pace} loadavg={os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
