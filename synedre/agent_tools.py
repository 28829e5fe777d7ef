"""The agent's tools (SPEC §8, §13): a built-in list per prompt kind that configuration may
only narrow, and a deny list that nothing removes.

Measured with the pinned CLI (2.1.332, tests/spawn/test_agent_lane.py): under
`--permission-mode bypassPermissions`, `--allowed-tools` approves without restricting (a
tool outside it still runs), so the allowed names also go to `--tools`, the CLI's set of
available built-in tools, which is what takes the others away (see `runner.build_argv`).
`--disallowed-tools` rules still apply in that mode: a matching Bash command is refused
and reported in the result's `permission_denials`, which makes the run a failure
(`stage.succeeded`). The rules match a command's prefix, compound commands included
(`git status && git stash` is refused), but not a command hidden behind another program
(`sh -c 'git stash'`, `git -C . stash`): the deny list keeps an agent in its lane; what
bounds it is the sandbox (synedre/spawn/sandbox.py, tests/spawn/test_sandbox.py).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

_EDIT = ("Bash", "Read", "Edit", "Write", "Glob", "Grep")
# The rich prompts may meet a notebook in a client's repository; the lean run does not.
DEFAULT_TOOLS: dict[str, tuple[str, ...]] = {
    "lean": _EDIT,
    "rich": (*_EDIT, "NotebookEdit"),
    "plan": (*_EDIT, "NotebookEdit"),
}
KNOWN_TOOLS: tuple[str, ...] = tuple(dict.fromkeys(t for tools in DEFAULT_TOOLS.values() for t in tools))

# Always denied, whatever the configuration. Git commands that hide, rewrite or publish work
# (the pipeline, not the agent, merges and deploys), then everything that reaches the
# network. A first filter only: the sandbox (synedre/spawn/sandbox.py) is the boundary.
DENIED_GIT = ("Bash(git stash:*)", "Bash(git push:*)", "Bash(git remote:*)", "Bash(git reset --hard:*)",
              "Bash(git fetch:*)", "Bash(git pull:*)", "Bash(git clone:*)", "Bash(git worktree:*)")
DENIED_NETWORK = ("WebFetch", "WebSearch", "Bash(curl:*)", "Bash(wget:*)", "Bash(ssh:*)", "Bash(scp:*)",
                  "Bash(sftp:*)", "Bash(rsync:*)", "Bash(nc:*)", "Bash(ncat:*)", "Bash(netcat:*)",
                  "Bash(telnet:*)", "Bash(ftp:*)")
DENIED: tuple[str, ...] = DENIED_GIT + DENIED_NETWORK


class ToolsWidened(ValueError):
    """The configuration names a tool the built-in lists do not give: it may only narrow."""


def configured(value: str | None) -> tuple[str, ...] | None:
    """SYNEDRE_AGENT_TOOLS parsed: None (unset or blank) keeps the built-in lists."""
    if value is None or not value.strip():
        return None
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    extra = [n for n in names if n not in KNOWN_TOOLS]
    if extra:
        raise ToolsWidened(
            f"SYNEDRE_AGENT_TOOLS may only remove tools from the built-in list "
            f"({', '.join(KNOWN_TOOLS)}); not in it: {', '.join(extra)}")
    return names


@dataclass(frozen=True)
class ToolPolicy:
    kind: str
    allowed: tuple[str, ...]  # --tools and --allowed-tools
    disallowed: tuple[str, ...]  # --disallowed-tools

    def as_record(self) -> dict[str, object]:
        """What the launch row keeps (synedre.launches.agent_tools)."""
        return {"kind": self.kind, "allowed": list(self.allowed), "disallowed": list(self.disallowed)}


def policy(kind: str, keep: Iterable[str] | None = None) -> ToolPolicy:
    """The kind's built-in list, minus what `keep` (from `configured`) leaves out. A tool
    taken away is also denied outright, so the CLI refuses it even if it offered it."""
    default = DEFAULT_TOOLS[kind]  # an unknown kind is a caller bug
    kept = set(default) if keep is None else set(keep)
    allowed = tuple(t for t in default if t in kept)
    removed = tuple(t for t in default if t not in kept)
    return ToolPolicy(kind, allowed, DENIED + removed)
