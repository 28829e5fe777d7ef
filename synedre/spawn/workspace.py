"""The agent's workspace: its own clone of the client repository (SPEC §8 Workspace).

Each launch gets a clone, on a new branch `synedre/<name>` forked from the pre-production
branch, under the launch area's `clones/` (never beside the trunk, never sharing its git
directory: a worktree writes the trunk's objects, refs and hooks, so an agent in one could
reach the trunk, and a hook it planted would run when the fleet merged). There is no fallback:
a clone that cannot be made raises `WorkspaceError` and the launch fails, audited.

The clone is made by the fleet from the trunk (`--no-hardlinks`: a chown must never reach the
trunk's objects through a shared inode), its `origin` removed, and, when the agent runs as its
own OS user (`owner`), handed to that user. After the run, `collect` brings the branch back
into the trunk's repository by a fetch whose serving side runs as the agent (or, without an
agent user, with the clone's hooks and executable configuration overridden): nothing the agent
wrote in its clone runs as the fleet. Every git command the fleet runs inside a clone does the
same (`git.IN_CLONE`). `merge_back` then merges the branch into the trunk, only after a successful
verdict and only into a clean trunk on its branch; a failed, stopped or salvaged run's commits
stay on their branch, which `close_workspace` keeps. A merge that fails is its caller's
`merge_failed`, never a success.

Git runs through `git.run` (synedre/spawn/git.py). Operations on one repository (clone,
fetch-back, merge) run under `git.repo_lock`, one lock per repository shared by every process
on the host. A clone holding uncommitted work (untracked
files included) is never deleted.
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from synedre.log import log
from synedre.spawn import git
from synedre.spawn.git import GIT_TIMEOUT_S, WorkspaceError, repo_lock
from synedre.spawn.launcher import RunAs

BRANCH_PREFIX = "synedre/"
# Inside Claude Code's Bash sandbox (2.1.332), each of these that the workspace lacks shows up
# as a mount point (/dev/null or an empty directory) so a command cannot plant it; `git add -A`
# would then fail on them ("can only add regular files"). Untracked only: a tracked one is not
# affected. tests/spawn/test_launch_e2e.py commits with `git add -A` through the real CLI.
SANDBOX_MOUNT_POINTS = (".bash_profile", ".bashrc", ".claude", ".gitconfig", ".gitmodules", ".idea",
                        ".mcp.json", ".profile", ".ripgreprc", ".vscode", ".zprofile", ".zshrc")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# What the fleet puts in a clone for the agent to read (an iteration's mock-up diff images):
# excluded from git, so never committed, never merged.
FLEET_DIR = ".synedre-qa"


@dataclass(frozen=True)
class Workspace:
    path: Path  # the agent's clone, where it runs
    branch: str  # `synedre/<name>`
    repo: Path  # the trunk's working tree
    base_branch: str
    base_sha: str | None = None  # where the agent started: commits after it are its own
    owner: RunAs | None = None  # set: the clone is owned by that user (the agent runs as it)


@dataclass(frozen=True)
class MergeResult:
    merged: bool
    reason: str
    commits: list[str]  # "<sha> <subject>", oldest first

    @property
    def failed(self) -> bool:
        """The agent committed and its work did not reach the trunk (`merge_failed`)."""
        return not self.merged and bool(self.commits)


def _dirty(path: Path, as_user: RunAs | None = None, clone: bool = False) -> bool:
    opts = git.IN_CLONE if clone else ()
    return bool(git.output(path, *opts, "status", "--porcelain", "--untracked-files=all", as_user=as_user))


def open_workspace(repo: Path, *, base_branch: str, name: str, root: Path,
                   owner: RunAs | None = None) -> Workspace:
    """The agent's clone at `<root>/<repo name>/<name>` on `synedre/<name>`, forked from
    `base_branch` (or from that branch if it exists: a resumed launch keeps its commits).
    Reopening a name reuses the clone as the agent left it. `owner`: the clone is handed to
    that user. Any failure raises `WorkspaceError`: the trunk is never the agent's to work on."""
    repo = repo.resolve()
    if not _NAME.fullmatch(name):
        raise WorkspaceError(f"invalid workspace name {name!r}")
    branch = BRANCH_PREFIX + name
    path = root.resolve() / repo.name / name
    try:
        with repo_lock(repo):
            git.output(repo, "rev-parse", "--verify", f"refs/heads/{base_branch}^{{commit}}")
            has_branch = git.run(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}",
                              ok=(0, 1)).returncode == 0
            base_sha = git.output(repo, "merge-base", base_branch, branch if has_branch else base_branch)
            if path.exists():  # a resumed launch: the agent's clone, as it left it
                if git.run(path, *git.IN_CLONE, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}",
                        ok=(0, 1), as_user=owner).returncode != 0:
                    raise WorkspaceError(f"{path} exists without the branch {branch}")
            else:
                _make_clone(repo, base_branch, branch, has_branch, path, owner)
    except OSError as exc:
        raise WorkspaceError(f"{path}: {exc}") from exc
    log.info("workspace_opened", repo=str(repo), path=str(path), branch=branch,
             owner=owner.name if owner else None)
    return Workspace(path=path, branch=branch, repo=repo, base_branch=base_branch, base_sha=base_sha,
                     owner=owner)


def _make_clone(repo: Path, base_branch: str, branch: str, has_branch: bool, path: Path,
                owner: RunAs | None) -> None:
    if owner is not None:
        traversable_dir(path.parent)
    else:
        private_dir(path.parent)
    tmp = path.with_name(path.name + ".new")
    subprocess.run(["rm", "-rf", "--one-file-system", str(tmp)], check=True, timeout=GIT_TIMEOUT_S)
    # Made by the fleet from the trunk (nothing of the agent's is read), then handed over.
    git.run(path.parent, "clone", "--quiet", "--no-hardlinks", "--no-tags", "--branch",
         branch if has_branch else base_branch, str(repo), str(tmp))
    if not has_branch:
        git.output(tmp, "checkout", "--quiet", "-b", branch)
    git.output(tmp, "remote", "remove", "origin")  # the trunk is not the agent's to fetch from
    with (tmp / ".git" / "info" / "exclude").open("a") as fh:
        fh.write("\n# synedre: the sandbox's mount points (not the agent's work)\n"
                 + "".join(f"/{name}\n" for name in SANDBOX_MOUNT_POINTS)
                 + f"# synedre: what the fleet gives the agent to read\n/{FLEET_DIR}/\n")
    if owner is not None:
        chown_tree(tmp, owner)
    tmp.rename(path)


def place_files(ws: Workspace, files: tuple[tuple[str, bytes], ...]) -> None:
    """Write `files` (paths under `FLEET_DIR`, bytes) into the clone before the agent starts,
    readable by it and never committed. A reused clone is the agent's: nothing there is
    followed (a planted symlink or hard link is replaced, never written through), and one
    made before `FLEET_DIR` was excluded is refused (`WorkspaceError`)."""
    if not files:
        return
    exclude = ws.path / ".git" / "info" / "exclude"
    st = exclude.lstat()
    if not stat.S_ISREG(st.st_mode) or f"/{FLEET_DIR}/" not in exclude.read_text(errors="replace").split("\n"):
        raise WorkspaceError(f"{ws.path}: {FLEET_DIR} is not excluded from its git: nothing placed")
    top = ws.path / FLEET_DIR
    if top.is_symlink() or (top.exists() and not top.is_dir()):
        top.unlink()
    top.mkdir(mode=0o755, exist_ok=True)
    for rel, data in files:
        target = ws.path / rel
        if target.parent != top or not _NAME.fullmatch(target.name):
            raise WorkspaceError(f"not a file name under {FLEET_DIR}: {rel!r}")
        target.unlink(missing_ok=True)  # whatever the agent left there, never written through
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    if ws.owner is not None:
        chown_tree(top, ws.owner)


def collect(ws: Workspace) -> str | None:
    """Bring the agent's branch from its clone into the trunk's repository; None, or why it
    could not (then the trunk keeps what it had of the branch). The serving side runs as the
    agent, or with the clone's hooks and fsmonitor overridden: the fleet runs nothing of its."""
    if ws.owner is not None:
        serve = " ".join(["setpriv", f"--reuid={ws.owner.uid}", f"--regid={ws.owner.gid}", "--clear-groups",
                          "env", *(f"{k}={v}" for k, v in git.AS_AGENT_ENV.items()), "git-upload-pack"])
    else:
        serve = " ".join(["env", *(f"{k}={v}" for k, v in git.AS_AGENT_ENV.items()), "git", *git.IN_CLONE,
                          "upload-pack"])
    try:
        with repo_lock(ws.repo):
            git.output(ws.repo, "-c", "protocol.file.allow=always", "fetch", "--quiet", "--no-tags",
                 "--upload-pack", serve, str(ws.path), f"+refs/heads/{ws.branch}:refs/heads/{ws.branch}")
    except WorkspaceError as exc:
        log.warning("workspace_collect_failed", path=str(ws.path), branch=ws.branch, error=str(exc))
        return str(exc)
    return None


def traversable_dir(path: Path) -> Path:
    """`path` (made if missing, root's, 0711) and every parent searchable by others: the
    agent user reaches what is below by name, lists none of it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o711)
    path.chmod(0o711)
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod((mode & 0o7777) | 0o001)
    return path


def agent_dir(path: Path, owner: RunAs) -> Path:
    """A directory the agent user owns, 0700, its parent traversable."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.lchown(path, owner.uid, owner.gid)
    path.chmod(0o700)
    return path


def chown_tree(path: Path, owner: RunAs) -> None:
    """Give a tree root made to the agent; symlinks themselves, never what they point at."""
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), owner.uid, owner.gid)
    os.lchown(path, owner.uid, owner.gid)


def settle_agent_file(path: Path) -> None:
    """After the agent's processes are gone: a file it wrote is only read if it is a plain
    file of its own (a symlink or a hard link could make root read something else)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return

    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        log.warning("agent_file_refused", path=str(path), mode=oct(st.st_mode), links=st.st_nlink)
        if stat.S_ISDIR(st.st_mode):
            subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False, timeout=GIT_TIMEOUT_S)
        else:
            path.unlink(missing_ok=True)


def _has_branch(repo: Path, branch: str) -> bool:
    return git.run(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", ok=(0, 1)).returncode == 0


def commits_since(ws: Workspace) -> list[str]:
    """The agent's commits since it started, "<sha> <subject>", oldest first (salvage), as far
    as they were brought back (`collect`)."""
    if ws.base_sha is None or not _has_branch(ws.repo, ws.branch):
        return []
    lines = git.output(ws.repo, "log", "--reverse", "--format=%H %s", f"{ws.base_sha}..{ws.branch}")
    return lines.splitlines()


def committed_paths(ws: Workspace) -> list[str]:
    """Every path the agent's commits since it started added or changed (deletions aside),
    in any of them, even if a later commit removed it again."""
    if ws.base_sha is None or not _has_branch(ws.repo, ws.branch):
        return []
    out = git.output(ws.repo, "log", "--reverse", "--format=", "--name-only", "--no-renames", "--diff-filter=d",
               "-z", f"{ws.base_sha}..{ws.branch}")
    return list(dict.fromkeys(p.strip("\n") for p in out.split("\0") if p.strip("\n")))


def read_file(path: Path, limit: int = 256 * 1024) -> str | None:
    """A (possibly half-written) file, at most `limit` bytes of it; None if absent (salvage)."""
    try:
        with path.open("rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


PRIVATE_UMASK = 0o077


@contextmanager
def private_files() -> Iterator[None]:
    """Everything created inside is private to the fleet's user: directories 0700, files
    0600 (executables checked out by git keep only u+x). The agent's CLI and every tool it
    runs inherit the umask when they are started inside.

    Why a umask, which is process-wide: it is the only way to reach what git, the CLI and
    the agent's tools create, which no explicit chmod of ours sees. It is safe because the
    spawn worker is prefork with one launch per process at a time, and the threads running
    beside a launch (lock heartbeats, the event writer) create no file. What the launch
    does to shared state — the merge into the trunk, whose files keep the repository's
    usual modes — runs after the block, under the process's own umask again. A repository
    shared between OS users sets `core.sharedRepository`, which git applies over the umask
    to what it writes in the git directory."""
    previous = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def private_dir(path: Path) -> Path:
    """`path` and its missing parents, 0700 even if it existed with other modes."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def private_file(path: Path) -> Path:
    """An empty file (kept if present), 0600."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    path.chmod(0o600)
    return path


def merge_back(ws: Workspace) -> MergeResult:
    """Merge the agent's branch into the trunk: fast-forward, else a merge commit.

    Only when the agent committed and the trunk is clean and on `base_branch`; a
    conflicting merge is aborted, which restores the trunk exactly since it was clean.
    """
    with repo_lock(ws.repo):
        if not _has_branch(ws.repo, ws.branch):
            return MergeResult(False, "no commits to merge", [])  # the agent's branch never came back
        commits = git.output(ws.repo, "log", "--reverse", "--format=%H %s",
                       f"{ws.base_branch}..{ws.branch}").splitlines()
        if not commits:
            return MergeResult(False, "no commits to merge", [])
        head = git.run(ws.repo, "symbolic-ref", "--quiet", "--short", "HEAD", ok=(0, 1))
        if head.stdout.strip() != ws.base_branch:
            return MergeResult(False, f"trunk is not on {ws.base_branch} "
                               f"({head.stdout.strip() or 'detached HEAD'})", commits)
        if _dirty(ws.repo):
            return MergeResult(False, "trunk has uncommitted changes", commits)
        fast_forward = git.run(ws.repo, "merge-base", "--is-ancestor", ws.base_branch,
                            ws.branch, ok=(0, 1)).returncode == 0
        try:
            git.output(ws.repo, "merge", "--ff", "--no-edit", "-m",
                 f"Merge {ws.branch} into {ws.base_branch}", ws.branch)
        except WorkspaceError as exc:
            if git.run(ws.repo, "rev-parse", "--quiet", "--verify", "MERGE_HEAD",
                    ok=(0, 1)).returncode == 0:
                git.output(ws.repo, "merge", "--abort")
            log.warning("workspace_merge_failed", branch=ws.branch, error=str(exc))
            return MergeResult(False, f"merge failed: {exc}", commits)
    reason = "fast-forward" if fast_forward else "merge commit"
    log.info("workspace_merged", branch=ws.branch, base=ws.base_branch, how=reason)
    return MergeResult(True, reason, commits)


def close_workspace(ws: Workspace) -> bool:
    """Remove a clean clone; True when nothing is left to clean up.

    A clone with uncommitted work is kept (False). The branch is deleted from the trunk's
    repository only if it is merged into `base_branch`; otherwise it stays, holding the
    agent's commits."""
    if ws.path.exists():
        if _dirty(ws.path, ws.owner, clone=True):
            log.warning("workspace_kept_dirty", path=str(ws.path), branch=ws.branch)
            return False
        subprocess.run(["rm", "-rf", "--one-file-system", str(ws.path)], check=True, timeout=GIT_TIMEOUT_S)
    with repo_lock(ws.repo):
        has_branch = git.run(ws.repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{ws.branch}",
                          ok=(0, 1)).returncode == 0
        if has_branch and git.run(ws.repo, "merge-base", "--is-ancestor", ws.branch, ws.base_branch,
                               ok=(0, 1)).returncode == 0:
            git.output(ws.repo, "branch", "-D", ws.branch)
    return True


def _last_activity(path: Path) -> float:
    """Newest mtime of the clone directory and of its HEAD and index (git updates them)."""
    return max(p.stat().st_mtime for p in (path, path / ".git" / "HEAD", path / ".git" / "index") if p.exists())


def prune_stale(root: Path, older_than_s: float) -> list[Path]:
    """At worker start: remove the clean idle clones under `root` (`<root>/<repo>/<name>`).

    Idle = no activity for `older_than_s`, which must exceed the launch budget: another
    worker's agent may be running in one. A dirty clone is never removed (its status is read
    as the clone's owner, with its hooks and fsmonitor overridden)."""
    removed: list[Path] = []
    for path in sorted(root.glob("*/*")):
        if not (path / ".git").is_dir() or path.name.endswith(".new"):
            continue
        try:
            if time.time() - _last_activity(path) < older_than_s:
                continue
            st = path.stat()
            owner = None if st.st_uid == os.geteuid() else RunAs(f"uid {st.st_uid}", st.st_uid, st.st_gid)
            if _dirty(path, owner, clone=True):
                log.warning("workspace_stale_kept_dirty", path=str(path))
                continue
            subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True, timeout=GIT_TIMEOUT_S)
        except (WorkspaceError, OSError, subprocess.SubprocessError) as exc:  # one broken clone must not block
            log.warning("workspace_prune_failed", path=str(path), error=str(exc))
            continue
        removed.append(path)
    if removed:
        log.info("workspace_pruned", root=str(root), count=len(removed))
    return removed


def init_scratch(repo: Path, base_branch: str) -> None:
    """An empty repository with one commit on `base_branch`, for deployments that name
    none: the agent still works in a clone and its commits are still salvageable."""
    if (repo / ".git").exists():
        return
    repo.mkdir(parents=True, exist_ok=True)
    git.run(repo, "init", "-q", "-b", base_branch)
    git.run(repo, "config", "user.name", "Synedre")
    git.run(repo, "config", "user.email", "synedre@localhost")
    git.run(repo, "commit", "-q", "--allow-empty", "-m", "scratch workspace")
