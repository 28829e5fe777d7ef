"""What the agent wrote never runs as the fleet (issue 25, SPEC §13), end to end: an agent's
commit adds to the client's `./deploy` a line that writes `id` outside its checkout, reads the
mailbox registry and a file of the state directory, and connects to a loopback server. The
message waits for the founder's OK with that diff in the request; after `synedre approve`, the
line runs as `synedre-deploy`, in its sandbox: every read refused, nothing reaches the server,
nothing written outside the deploy's checkout. The real `claude` CLI against the scripted API,
real workers, the real deploy, Chromium, aiosmtpd."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest

from tests.orchestrate.test_close_the_loop import contract_step, loop, q, status  # noqa: F401
from tests.orchestrate.test_deploy import Listener
from tests.services import stack
from tests.services.claude_api import ScriptedModel, bash, text
from tests.spawn.test_launch_e2e import make_launchable

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="the deploy switches to its own user: a root worker")]


def probe_line(registry, state_file, port: int, outside) -> str:
    return (f'\nid > {outside} 2>/dev/null || echo "WRITE-OUTSIDE-REFUSED"; id -un\n'
            f'cat {registry} 2>/dev/null || echo "READ-REGISTRY-REFUSED"\n'
            f'cat {state_file} 2>/dev/null || echo "READ-STATE-REFUSED"\n'
            f'curl -fsS -m 5 http://127.0.0.1:{port}/leak >/dev/null 2>&1 || echo "LOOPBACK-REFUSED"\n'
            f'(exec 3<>/dev/tcp/127.0.0.1/{port} && echo raw >&3) 2>/dev/null || echo "RAW-LOOPBACK-REFUSED"\n')


def test_an_agent_s_change_to_deploy_waits_for_the_founder_then_runs_confined(loop, tmp_path):  # noqa: F811
    url, env = loop["url"], loop["env"]
    policy = tmp_path / "policy.toml"
    policy.write_text("[touches_deploy]\nenabled = true\n")  # the shipped rule alone
    env["SYNEDRE_APPROVAL_POLICY_FILE"] = str(policy)
    state_file = tmp_path / "state" / "fleet-secret.txt"
    state_file.parent.mkdir(exist_ok=True)
    state_file.write_text("state-dir-content-42")
    state_file.chmod(0o644)  # world-readable: only the sandbox keeps it out
    registry = tmp_path / "mailboxes.toml"
    registry.chmod(0o644)
    outside = tmp_path / f"outside-{secrets.token_hex(4)}"
    tmp_path.chmod(0o777)  # the deploy user could write there, were it not for its sandbox
    server = Listener("127.0.0.1")
    line = probe_line(registry, state_file, server.port, outside)
    agent = ScriptedModel([
        [bash(f"cat >> deploy <<'EOF'{line}EOF\ngit add deploy && git commit -qm 'deploy: add a probe'")],
        [contract_step(routes=("/",))], [text("Done.")]])
    mid, = make_launchable(url, loop["tmp"], complexity="plan", tag="deployprobe")
    try:
        api = loop["start"](agent)
        logs = tmp_path / "poll-logs"
        logs.mkdir()
        # the approval stage mails the request (queue poll)
        poller = stack.celery_worker({**env, "SYNEDRE_ANTHROPIC_BASE_URL": api.url}, logs, queues="poll",
                                     concurrency=1)
        from tasks.app import app
        app.send_task("synedre.spawn", args=[mid])
        stack.wait_for(lambda: status(url, mid) in ("awaiting_approval", "actioned", "escalated", "spawn_failed",
                                                    "orchestration_failed", "deployed", "qa_failed"),
                       150, "the deploy to wait for the founder", interval=0.5)
        assert status(url, mid) == "awaiting_approval", q(url, "SELECT event, detail FROM synedre.audit_log"
                                                               " WHERE message_id = %s ORDER BY id", mid)
        assert q(url, "SELECT count(*) FROM synedre.qa_runs WHERE message_id = %s", mid) == [(0,)]  # nothing ran
        gate, rule, paths = q(url, "SELECT gate, rule, facts->'paths' FROM synedre.approvals"
                                   " WHERE message_id = %s AND status = 'waiting'", mid)[0]
        assert (gate, rule, paths) == ("deploy", "approval_rule_touches_deploy", ["deploy"])
        # the request reaches the founder with the diff of ./deploy, fenced
        mails = loop["smtp"].wait_for(1, timeout=60)
        body = mails[0].message.get_body(("plain",)).get_content()
        assert "Un déploiement attend votre accord" in body and "+cat " + str(registry) in body, body
        assert "----- début " in body and "deploy: add a probe" not in mails[0].message["Subject"]

        approved = subprocess.run([sys.executable, "-m", "synedre.cli", "approve", str(mid)], env=env,
                                  capture_output=True, text=True, timeout=60, cwd=stack.ROOT)
        assert approved.returncode == 0 and "handed to deploy" in approved.stdout, approved.stderr
        stack.wait_for(lambda: q(url, "SELECT count(*) FROM synedre.qa_runs WHERE message_id = %s", mid)[0][0] > 0,
                       120, "the approved deploy to run", interval=0.5)
    finally:
        server.close()
        if "poller" in locals():
            poller.stop()
    log, = q(url, "SELECT deploy_log FROM synedre.qa_runs WHERE message_id = %s", mid)[0]
    assert "published 3 pages to acme" in log, log  # the site's own deploy still publishes
    assert "\nsynedre-deploy\n" in f"\n{log}\n"  # the agent's line ran as the deploy's own user
    for refused in ("WRITE-OUTSIDE-REFUSED", "READ-REGISTRY-REFUSED", "READ-STATE-REFUSED", "LOOPBACK-REFUSED",
                    "RAW-LOOPBACK-REFUSED"):
        assert refused in log, log
    assert "state-dir-content-42" not in log and "imap_host" not in log
    assert server.received == []
    assert not outside.exists()
    decided = q(url, "SELECT decided_by FROM synedre.approvals WHERE message_id = %s AND gate = 'deploy'", mid)
    assert decided[0][0].startswith("operator:")
    # what ran is now the accepted script: a later deploy of the same tree does not ask again
    assert q(url, "SELECT sha FROM synedre.deploy_baselines")[0][0] == q(
        url, "SELECT facts->>'head' FROM synedre.approvals WHERE message_id = %s AND gate = 'deploy'", mid)[0][0]
