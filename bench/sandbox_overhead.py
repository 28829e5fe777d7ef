"""What the agent's sandbox costs each Bash command, apart from what it costs once at the start.

Five launches with the sandbox and five without, interleaved (with, without, with, ...) so that
the machine's noise falls on both, each of the real `claude` CLI under the runner's pty
(synedre/spawn/launcher.py) against the scripted Messages API (tests/services/claude_api.py), in a
fresh clone. The model asks for 21 Bash commands, one per turn:

- the first (`git status`, `ls`, and a write outside the workspace, which must fail when
  sandboxed and succeed when not, or the bench stops: a run that was not really sandboxed, or
  one that was when it should not be) carries the one-time start: the CLI's own start, and with
  the sandbox its proxy and its settings. Its time, from just before `launcher.run` to the
  arrival of the request that carries its result, is printed for context
  (`first_result_*_s`, medians over the launches);
- the next 20 (`echo i`) are the per-command cost: command i's time is from the arrival of the
  request carrying command i-1's result to the arrival of the one carrying command i's (the
  CLI's own turn + the command, the scripted model answering at once), 20 per launch.

The overhead per command is the median of the 100 sandboxed times minus the median of the 100
unsandboxed ones. "With" is a launch's own settings (synedre/spawn/sandbox.py: bubblewrap, no
network, writes confined, the fleet's files hidden: `Settings.fleet_files`, this checkout's
included, as a launch gets them); "without" is the same argv without `--settings`.
Target: at most 50 ms a command (issue 30, acceptance 4).

Where a sandboxed command's time goes (CLI 2.1.332, profiled at a load of ~1: ~80 ms of tool
time against ~8 unsandboxed): a new bubblewrap per command with ~64 mounts (~25 ms), the two
socat bridges to the CLI's proxy started inside it and waited for (~30 ms), apply-seccomp's
nested namespace (~8 ms), and in the CLI itself the mandatory deny paths recomputed for every
writable root (thousands of stat/readlink calls, a ripgrep scan) and their mount points removed
afterwards. No settings key the CLI documents shortens these without weakening the boundary
(`allowAllUnixSockets` drops the seccomp filter, `enableWeakerNestedSandbox` the fresh /proc; a
system `ripgrep.command` or absolute `bwrapPath`/`socatPath` measured no gain).
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
from synedre.config import Settings  # noqa: E402
from synedre.log import configure  # noqa: E402
from synedre.redact import Redactor  # noqa: E402
from synedre.spawn import launcher, sandbox  # noqa: E402
from tests.services.claude_api import ScriptedModel, bash, start_claude_api, text  # noqa: E402
from tests.spawn.test_claude_cli_offline import cli_env  # noqa: E402

LAUNCHES = 5
COMMANDS = 20
TARGET_MS = 50.0


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, timeout=60)


def one_launch(top: Path, sandboxed: bool) -> tuple[float, list[float]]:
    """One fresh launch: seconds to the first command's result, and each later command's seconds."""
    trunk, ws, out, home = top / "trunk", top / "ws", top / "out", top / "home"
    for d in (trunk, out, home / "tmp"):
        d.mkdir(parents=True)
    git(trunk, "init", "-q", "-b", "main")
    (trunk / "README").write_text("bench\n")
    git(trunk, "add", "README")
    git(trunk, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init")
    git(top, "clone", "-q", str(trunk), str(ws))
    outside = top / "outside.txt"
    script = [[bash(f"git status --short; ls; touch {outside} || true")],
              *([bash(f"echo {i}")] for i in range(1, COMMANDS + 1)), [text("done")]]
    api = start_claude_api(ScriptedModel(script))
    try:
        settings = None
        if sandboxed:
            settings = sandbox.write_settings(top / sandbox.SETTINGS_NAME, sandbox.settings(
                workspace=ws, contract_dir=out, launch_dir=top, repo=trunk,
                fleet=Settings(state_dir=top / "state").fleet_files(), domains=[]),
                None)
        lane = tools.policy("lean")
        argv = launcher.build_argv(shutil.which("claude") or "claude", add_dir=[ws, out], settings=settings,
                                 prompt="Look at the repository.", system_prompt="Bench.", model="sonnet",
                                 allowed_tools=lane.allowed, disallowed_tools=lane.disallowed)
        env = cli_env(api.url, home)
        if os.geteuid() != 0:
            env.pop("IS_SANDBOX", None)
        t0 = time.monotonic()
        outcome = launcher.run(argv, cwd=ws, env=env, limits=launcher.Limits(idle_timeout_s=60, budget_s=240),
                             redactor=Redactor(), on_events=lambda batch: None, ndjson_path=None)
        arrived: dict[int, float] = {}
        for r in api.main_requests():  # a request the CLI retried: its first arrival
            if r.step is not None:
                arrived.setdefault(r.step, r.at)
    finally:
        api.stop()
    steps = range(1, COMMANDS + 2)  # step k carries the result of the k-th command
    if outcome.result is None or any(k not in arrived for k in steps):
        raise RuntimeError(f"launch did not reach its last tool result: {outcome.stop_reason}, "
                           f"steps {sorted(arrived)}")
    if outside.exists() == sandboxed:
        raise RuntimeError(f"sandboxed={sandboxed} but the write outside the workspace "
                           f"{'succeeded' if outside.exists() else 'failed'}")
    return arrived[1] - t0, [arrived[k + 1] - arrived[k] for k in range(1, COMMANDS + 1)]


def main() -> None:
    if shutil.which("claude") is None or shutil.which("bwrap") is None:
        sys.exit("needs the claude CLI and bubblewrap (scripts/system-deps)")
    configure("console", "WARNING")  # the runner's line per launch would bury the result
    firsts: dict[bool, list[float]] = {False: [], True: []}
    per_command: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        one_launch(Path(tmp) / "warmup", True)  # the first start of the CLI warms the page cache
        for i in range(2 * LAUNCHES):
            sandboxed = i % 2 == 0
            first, each = one_launch(Path(tmp) / f"{i}-{int(sandboxed)}", sandboxed)
            firsts[sandboxed].append(first)
            per_command[sandboxed].extend(each)
    with_ms, without_ms = (statistics.median(per_command[s]) * 1000 for s in (True, False))
    overhead = with_ms - without_ms
    print(f"sandbox_overhead per_command_ms={overhead:.0f} with_median_ms={with_ms:.0f} "
          f"without_median_ms={without_ms:.0f} first_result_with_s={statistics.median(firsts[True]):.2f} "
          f"first_result_without_s={statistics.median(firsts[False]):.2f} (target <= {TARGET_MS:.0f} ms) "
          f"{'OK' if overhead <= TARGET_MS else 'MISSED'} commands={COMMANDS}x{LAUNCHES} "
          f"loadavg={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
