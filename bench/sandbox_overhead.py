"""What the agent's sandbox costs a launch: from launch to the agent's first tool result.

Ten launches with the sandbox and ten without, interleaved so that the machine's noise falls
on both, each of the real `claude` CLI under the runner's pty (synedre/spawn/launcher.py)
against the scripted Messages API (tests/services/claude_api.py), in a fresh clone: the model
asks for one Bash command at once, and the time is taken from just before `launcher.run` to the
arrival of the request that carries that command's result. "With" is a launch's own settings
(synedre/spawn/sandbox.py: bubblewrap, no network, writes confined); "without" is the same
argv without `--settings`. Each command also tries to write outside its workspace, so a run
that was not really sandboxed (or one that was when it should not be) stops the bench.
Target: the sandboxed median at most 1.5 times the unsandboxed one.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synedre import agent_tools as tools  # noqa: E402
from synedre.log import configure  # noqa: E402
from synedre.redact import Redactor  # noqa: E402
from synedre.spawn import launcher, sandbox  # noqa: E402
from tests.services.claude_api import ScriptedModel, bash, start_claude_api, text  # noqa: E402
from tests.spawn.test_claude_cli_offline import cli_env  # noqa: E402

LAUNCHES = 10
TARGET = 1.5


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, timeout=60)


def one_launch(top: Path, sandboxed: bool) -> float:
    """Seconds from launch to the first tool result, for one fresh launch."""
    trunk, ws, out, home = top / "trunk", top / "ws", top / "out", top / "home"
    for d in (trunk, out, home / "tmp"):
        d.mkdir(parents=True)
    git(trunk, "init", "-q", "-b", "main")
    (trunk / "README").write_text("bench\n")
    git(trunk, "add", "README")
    git(trunk, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init")
    git(top, "clone", "-q", str(trunk), str(ws))
    outside = top / "outside.txt"
    api = start_claude_api(ScriptedModel([[bash(f"git status --short; ls; touch {outside} || true")],
                                          [text("done")]]))
    try:
        settings = None
        if sandboxed:
            settings = sandbox.write_settings(top / sandbox.SETTINGS_NAME, sandbox.settings(
                workspace=ws, contract_dir=out, launch_dir=top, repo=trunk, state_dir=top / "state", domains=[]),
                None)
        lane = tools.policy("lean")
        argv = launcher.build_argv(shutil.which("claude") or "claude", add_dir=[ws, out], settings=settings,
                                 prompt="Look at the repository.", system_prompt="Bench.", model="sonnet",
                                 allowed_tools=lane.allowed, disallowed_tools=lane.disallowed)
        env = cli_env(api.url, home)
        if os.geteuid() != 0:
            env.pop("IS_SANDBOX", None)
        t0 = time.monotonic()
        outcome = launcher.run(argv, cwd=ws, env=env, limits=launcher.Limits(idle_timeout_s=60, budget_s=90),
                             redactor=Redactor(), on_events=lambda batch: None, ndjson_path=None)
        firsts = [r.at for r in api.main_requests() if r.step == 1]
    finally:
        api.stop()
    if outcome.result is None or not firsts:
        raise RuntimeError(f"launch did not reach its first tool result: {outcome.stop_reason}")
    if outside.exists() == sandboxed:
        raise RuntimeError(f"sandboxed={sandboxed} but the write outside the workspace "
                           f"{'succeeded' if outside.exists() else 'failed'}")
    return firsts[0] - t0


def main() -> None:
    if shutil.which("claude") is None or shutil.which("bwrap") is None:
        sys.exit("needs the claude CLI and bubblewrap (scripts/system-deps)")
    configure("console", "WARNING")  # the runner's line per launch would bury the result
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        one_launch(Path(tmp) / "warmup", True)  # the first start of the CLI warms the page cache
        for i in range(LAUNCHES):
            for sandboxed in ((False, True) if i % 2 == 0 else (True, False)):
                times[sandboxed].append(one_launch(Path(tmp) / f"{i}-{int(sandboxed)}", sandboxed))
    for sandboxed, label in ((False, "unsandboxed"), (True, "sandboxed")):
        t = times[sandboxed]
        print(f"sandbox_overhead mode={label} launches={len(t)} first_tool_result_p50={statistics.median(t):.2f} s "
              f"mean={statistics.mean(t):.2f} s max={max(t):.2f} s")
    ratio = statistics.median(times[True]) / statistics.median(times[False])
    print(f"sandbox_overhead ratio={ratio:.2f} (medians; target <= {TARGET}) loadavg={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
