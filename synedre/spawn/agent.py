"""Who the coding agent runs as, what it gets and where its files live (SPEC §8 Sandbox).

A launch and a persona's `agent ask --via claude` share all three: the unprivileged user
(never root by mistake), an environment with no database coordinates and no secret but the
API key the CLI itself needs, and a private directory under `<state>/agent/<name>` with the
agent's home (and its tmp) inside. A launch also gets its own /tmp (`apart`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from synedre.config import Settings
from synedre.spawn import launcher, workspace


def user(s: Settings) -> launcher.RunAs | None:
    """The unprivileged OS user the agent runs as when the worker is root, unless
    SYNEDRE_AGENT_AS_ROOT opts out; None when the worker is not root (the agent is the
    worker's user, confined by the sandbox). A user that does not exist fails the launch
    (KeyError): never fall back to root."""
    if os.geteuid() != 0 or s.agent_as_root:
        return None
    return launcher.RunAs.lookup(s.agent_user)


def env(s: Settings, context: str, home: Path, contract_path: Path | None = None,
        run_as: launcher.RunAs | None = None) -> dict[str, str]:
    """What the agent gets, and nothing else: no database coordinates (the sandbox lets no
    connection through), no secret but the API key the CLI itself needs, which the sandbox
    unsets for the agent's commands. The contract's path is there too, as well as in the
    system prompt. IS_SANDBOX only as root (the opt-out): the CLI refuses bypassPermissions
    as root without it. `context` (`launch:<id>`, `ask:<id>`) names the work in its logs."""
    out = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "LANG": "C.UTF-8",
           "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "CLAUDE_CODE_TMPDIR": str(home / "tmp"), "SYNEDRE_WORKER_CONTEXT": context,
           # the CLI's own files, its session store among them: in this home alone (spawn/session.py)
           "CLAUDE_CONFIG_DIR": str(home / ".claude"),
           "GIT_AUTHOR_NAME": "Atlas", "GIT_AUTHOR_EMAIL": "atlas@synedre.invalid",
           "GIT_COMMITTER_NAME": "Atlas", "GIT_COMMITTER_EMAIL": "atlas@synedre.invalid"}
    key, _ = s.resolve_key("anthropic")
    if key is not None:
        out["ANTHROPIC_API_KEY"] = key.get_secret_value()
    if s.anthropic_base_url:
        out["ANTHROPIC_BASE_URL"] = s.anthropic_base_url
    if s.agent_api_retries is not None:
        out["CLAUDE_CODE_MAX_RETRIES"] = str(s.agent_api_retries)
    if run_as is None and os.geteuid() == 0:
        out["IS_SANDBOX"] = "1"  # root, by the explicit opt-out: the CLI's own sandbox confines it
    if contract_path is not None:
        out["SYNEDRE_CONTRACT_PATH"] = str(contract_path)
    return out


@dataclass(frozen=True)
class Dirs:
    """`<state>/agent/<name>` (root's, which the agent user may traverse but not list, as the
    state directory itself) and the agent's home inside it."""
    mine: Path
    home: Path
    run_as: launcher.RunAs | None

    def own(self, name: str) -> Path:
        """A directory of the agent's own inside `mine` (its output, its working directory)."""
        path = self.mine / name
        return workspace.private_dir(path) if self.run_as is None else workspace.agent_dir(path, self.run_as)


def dirs(s: Settings, name: str, run_as: launcher.RunAs | None) -> Dirs:
    area = (s.state_dir / "agent").resolve()
    if run_as is None:
        mine = workspace.private_dir(area / name)
    else:
        mine = workspace.traversable_dir(workspace.traversable_dir(area) / name)
    d = Dirs(mine, mine / "home", run_as)
    d.own("home")
    d.own("home/tmp")
    return d


def apart(home: Path, keep: list[Path]) -> launcher.Apart:
    """The launch's own /tmp and /dev/shm (launcher.Apart): its home's `tmp` (its
    CLAUDE_CODE_TMPDIR too) on /tmp, `keep` (its own directories) in view wherever that covers
    them. A user namespace makes it, as the agent's user: no privilege needed, so a worker
    that is not root gets it too, where bubblewrap itself can make one."""
    return launcher.Apart(home / "tmp", tuple(keep))


def clones_root(s: Settings, run_as: launcher.RunAs | None) -> Path:
    """Where the launches' clones live: traversable by the agent user, who owns each clone."""
    area = (s.state_dir / "agent").resolve()
    return workspace.private_dir(area / "clones") if run_as is None else \
        workspace.traversable_dir(workspace.traversable_dir(area) / "clones")
