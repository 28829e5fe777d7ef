"""The agent's boundary (SPEC §8 Sandbox, §13): Claude Code's own Bash sandbox, failing closed.

Every launch passes the CLI a settings file of its own (`--settings`) that turns on the CLI's
sandbox: each Bash command, and every process it starts, runs inside bubblewrap with the
filesystem read-only but for the workspace and the contract's directory, and with no network
but through the CLI's proxy, which lets through only `SYNEDRE_AGENT_ALLOWED_DOMAINS` (none by
default). The keys are the pinned CLI's (2.1.332), as its settings schema documents them:

- `sandbox.enabled`, `sandbox.failIfUnavailable` (the CLI exits at start, before any model
  call, if bubblewrap cannot start), `sandbox.allowUnsandboxedCommands: false` (the model's
  `dangerouslyDisableSandbox` is ignored), `sandbox.autoAllowBashIfSandboxed`;
- `sandbox.filesystem.allowWrite` (the contract's directory beside the workspace, which is the
  working directory and writable by default), `denyWrite` (the client repository),
  `denyRead` and `allowRead` (the fleet's files, `Settings.fleet_files`: its checkout, `.env`,
  state directory, mailbox registry, approval policy and key files, but for the launch's own
  directory and workspace);
- `sandbox.network.allowedDomains`, `strictAllowlist` (a host outside it is refused, not
  asked about: nobody is there to answer);
- `sandbox.credentials.envVars` (`deny`: the API key is unset for the agent's commands);
- `permissions.blockWritesOutsideWorkingDirectories`: the Write/Edit/NotebookEdit tools, which
  the Bash sandbox does not cover, refuse any path outside the working directories (the
  workspace and `--add-dir`), and `permissions.deny` path rules name the places that matter
  most (the client repository and its hooks, the workspace's hooks and git configuration);
- `permissions.blockFileToolReadsOutsideWorkingDirectories` (read from `--settings` only): the
  Read/Grep/Glob tools, which the Bash sandbox does not cover either, refuse any path outside
  the working directories but the CLI's own files of this session: another launch's home and
  session store (spawn/session.py), which the agent's user also owns, and the fleet's files,
  stay out of reach. No `Read(...)` deny rule is needed on top: none of the fleet's files is
  inside a working directory, and a rule on the checkout or the state directory would also
  refuse the workspace they hold.

Every launch runs as the same agent user: what keeps two launches' temporary files apart is
the launch's own /tmp (launcher.Apart), not these settings.

What cannot pass the sandbox: a database connection. Loopback TCP is outside the network
namespace and Linux's sandbox cannot open one Unix socket by path (`allowUnixSockets` is
macOS-only), so the agent gets no database coordinates at all.

`preflight` checks, before the CLI is started, that bubblewrap and socat are on the agent's
PATH and that bubblewrap really starts a namespace as the agent's user, from inside the
launch's own namespace (launcher.Apart): a launch whose sandbox cannot start ends
`sandbox_unavailable` with no agent process. The CLI's own
`failIfUnavailable` is the second gate (`startup_failed`).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from synedre.spawn.launcher import Apart, RunAs, as_agent

SETTINGS_NAME = "claude-settings.json"
PREFLIGHT_TIMEOUT_S = 10.0
REQUIRED = ("bwrap", "socat")
# The CLI's `result` when its sandbox could not start (startup_failure_reason).
CLI_UNAVAILABLE = "sandbox_required_unavailable"
# Environment variables the agent's commands never see (the CLI itself needs them).
HIDDEN_ENV = ("ANTHROPIC_API_KEY",)


def allowed_domains(value: str | None) -> list[str]:
    """SYNEDRE_AGENT_ALLOWED_DOMAINS: a comma list; empty = no network at all."""
    return list(dict.fromkeys(d.strip() for d in (value or "").split(",") if d.strip()))


def _rule(path: Path) -> str:
    """A permission rule's absolute path (`//` starts one, gitignore-style `**` below)."""
    return "/" + str(path.resolve()) + "/**"


def settings(*, workspace: Path, contract_dir: Path, launch_dir: Path, repo: Path, fleet: Sequence[Path],
             domains: list[str]) -> dict[str, Any]:
    """The launch's settings: what the CLI is given, and what the launch row records.

    Reads: the fleet's files (`Settings.fleet_files`: its checkout, `.env`, its state
    directory, the mailbox registry, the approval policy, key files) are hidden but for this
    launch's own directory and workspace, which the state directory (and the checkout, when
    the state directory is inside it) holds: `allowRead` re-opens them inside what
    `denyRead` hides. Hidden as well: other launches, attachments, the embedded database.
    Writes, by any tool: the workspace and the contract's directory, never the client
    repository, nor the workspace's hooks and git configuration (an Edit deny rule is also a
    Bash `denyWrite`: the rest of `.git` stays writable, or the agent could not commit)."""
    ws_git = workspace.resolve() / ".git"
    own = [launch_dir.resolve(), workspace.resolve()]
    return {
        "sandbox": {
            "enabled": True,
            "failIfUnavailable": True,
            "allowUnsandboxedCommands": False,
            "autoAllowBashIfSandboxed": True,
            "filesystem": {"allowWrite": [str(contract_dir.resolve())],
                           "denyWrite": [str(repo.resolve())],
                           "denyRead": list(dict.fromkeys(str(p.resolve()) for p in fleet)),
                           "allowRead": [str(p) for p in own]},
            "network": {"allowedDomains": domains, "strictAllowlist": True},
            "credentials": {"envVars": [{"name": name, "mode": "deny"} for name in HIDDEN_ENV]},
        },
        "permissions": {
            "blockWritesOutsideWorkingDirectories": True,
            "blockFileToolReadsOutsideWorkingDirectories": True,
            "deny": [f"Edit({_rule(repo)})", f"Edit({_rule(ws_git / 'hooks')})", f"Edit(/{ws_git / 'config'})"],
        },
    }


def write_settings(path: Path, value: dict[str, Any], run_as: RunAs | None) -> Path:
    """The settings file: the fleet's, readable by the agent's group only, never writable by it."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(value, fh, indent=1)
    if run_as is not None:
        os.chown(path, 0, run_as.gid)
        path.chmod(0o640)
    return path


def preflight(path_env: str, run_as: RunAs | None, apart: Apart | None = None) -> str | None:
    """None when the sandbox can start for this agent, else why not (no agent is started):
    bubblewrap makes its namespaces as the agent's user, from inside the launch's own
    namespace (`apart`) as the CLI will."""
    missing = [b for b in REQUIRED if shutil.which(b, path=path_env) is None]
    if missing:
        return f"not on the agent's PATH: {', '.join(missing)} (Debian packages bubblewrap, socat)"
    bwrap = shutil.which("bwrap", path=path_env)
    assert bwrap is not None
    try:
        proc = subprocess.run([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                               "--unshare-all", "--die-with-parent", "true"], capture_output=True, text=True,
                              timeout=PREFLIGHT_TIMEOUT_S, stdin=subprocess.DEVNULL, cwd="/",
                              preexec_fn=as_agent(run_as, apart, "/"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not start: {exc}"
    except subprocess.SubprocessError as exc:  # its preexec_fn: the user, or the launch's own namespace
        return f"the agent's process could not be set up (its user, its own /tmp: launcher.Apart): {exc}"
    if proc.returncode != 0:
        return f"bubblewrap cannot make a namespace: {proc.stderr.strip()[-500:] or f'exit {proc.returncode}'}"
    return None
