"""A tenant's repository on this host: the local working tree it names, or this host's own
copy of the remote it names (issue 16, item 3).

A local path is used as it is: the launch's clone is made from it and merged back into it
(spawn/workspace.py). A remote URL gets, under the state directory, a working tree per host
and per use, named by the URL's hash: `mirrors/<hash>` for spawn (the agent's clones come
from it, its branch is collected and merged into it, then the merged pre-production branch
is pushed back), `checkouts/<hash>` for deploy (each `./deploy` gets a fresh copy of it, of what
the remote's pre-production branch holds: spawn and deploy need not share a disk, and a
deploy never dirties the tree a merge needs clean).

Before every use the copy is brought to the remote's branch (fetch, then the branch reset to
it: nothing of value lives only in a copy, since a merge that could not be pushed is undone).
Everything that moves a copy's branch (that refresh, a clone made from it, a merge and its
push) runs under the copy's own lock (`<hash>.lock`, a file lock beside it), taken outside
git.repo_lock, which the functions called inside take for themselves.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from synedre.config import Settings
from synedre.db.tenants import is_remote
from synedre.log import log
from synedre.spawn import git, workspace
from synedre.spawn.launcher import RunAs

MIRRORS, CHECKOUTS = "mirrors", "checkouts"
REMOTE_TIMEOUT_S = 300.0  # a first clone of a large remote
LOCK_TIMEOUT_S = 600.0  # git operations under a copy's lock take at most REMOTE_TIMEOUT_S each


def _remote_env() -> dict[str, str]:
    """Never a prompt for a password nor a host key: a remote the host cannot reach fails.
    The host's own GIT_SSH_COMMAND (a deploy key, say) is kept."""
    return {"GIT_SSH_COMMAND": "ssh -o BatchMode=yes", **os.environ, "GIT_TERMINAL_PROMPT": "0"}


@dataclass(frozen=True)
class Repository:
    path: Path              # the working tree this host uses
    remote: str | None = None  # the URL it mirrors (None: a local repository, used in place)


def locate(spec: str | None, s: Settings, use: str = MIRRORS) -> Repository | None:
    """The tenant's repository (`spec` from the directory, else SYNEDRE_WORKSPACE_REPO) on
    this host; None when neither names one."""
    if spec is None:
        return Repository(Path(s.workspace_repo)) if s.workspace_repo else None
    if not is_remote(spec):
        return Repository(Path(spec))
    name = hashlib.sha256(spec.encode()).hexdigest()[:16]
    return Repository((s.state_dir / use / name).resolve(), spec)


def _git(cwd: Path, *args: str, timeout: float = git.GIT_TIMEOUT_S) -> str:
    proc = git.completed(["git", "-C", str(cwd), *args], f"git {args[0]}", timeout, text=True, env=_remote_env())
    if proc.returncode != 0:
        raise workspace.WorkspaceError(f"git {args[0]}: exit {proc.returncode}: "
                                       f"{(proc.stderr.strip() or proc.stdout.strip())[-2000:]}")
    return proc.stdout.strip()


@contextmanager
def copy_lock(repo: Repository, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """The copy's lock (a remote's mirror or checkout); nothing for a local repository."""
    if repo.remote is None:
        yield
        return
    workspace.private_dir(repo.path.parent)
    with git.file_lock(repo.path.with_name(repo.path.name + ".lock"), timeout_s,
                             f"{repo.path}: busy for {timeout_s:g} s"):
        yield


def refresh(repo: Repository, branch: str) -> None:
    """The copy made if missing, then on the remote's `branch` as the remote has it. Under
    `copy_lock`. A local repository is left alone."""
    if repo.remote is None:
        return
    if not (repo.path / ".git").is_dir():
        tmp = repo.path.with_name(repo.path.name + ".new")
        subprocess.run(["rm", "-rf", "--one-file-system", str(tmp)], check=True, timeout=git.GIT_TIMEOUT_S)
        _git(repo.path.parent, "clone", "--quiet", "--no-tags", "--branch", branch, "--", repo.remote, str(tmp),
             timeout=REMOTE_TIMEOUT_S)
        _git(tmp, "config", "user.name", "Synedre")  # its merge commits
        _git(tmp, "config", "user.email", "synedre@localhost")
        tmp.rename(repo.path)
        log.info("repository_mirrored", remote=repo.remote, path=str(repo.path))
    _git(repo.path, "fetch", "--quiet", "--no-tags", "origin", f"+refs/heads/{branch}:refs/remotes/origin/{branch}",
         timeout=REMOTE_TIMEOUT_S)
    _git(repo.path, "checkout", "--quiet", "--force", "-B", branch, f"refs/remotes/origin/{branch}")


def open_workspace(repo: Repository, *, base_branch: str, name: str, root: Path,
                   owner: RunAs | None = None) -> workspace.Workspace:
    """workspace.open_workspace, from the remote's latest pre-production branch for a remote."""
    with copy_lock(repo):
        refresh(repo, base_branch)
        return workspace.open_workspace(repo.path, base_branch=base_branch, name=name, root=root, owner=owner)


def mirror_of(ws: workspace.Workspace, s: Settings) -> Repository:
    """The repository a workspace was opened from: a remote's mirror is under `mirrors/`."""
    if ws.repo.parent != (s.state_dir / MIRRORS).resolve():
        return Repository(ws.repo)
    return Repository(ws.repo, _git(ws.repo, "config", "--get", "remote.origin.url"))


def merge_back(ws: workspace.Workspace, s: Settings) -> workspace.MergeResult:
    """workspace.merge_back; for a remote's mirror, onto the remote's latest branch and pushed
    back. A push refused (the remote moved meanwhile, or refuses us) is a failed merge, the
    mirror's branch put back where the remote has it: the commits stay on the agent's branch."""
    try:
        repo = mirror_of(ws, s)
    except workspace.WorkspaceError as exc:
        return workspace.MergeResult(False, f"mirror unreadable: {exc}", workspace.commits_since(ws))
    if repo.remote is None:
        return workspace.merge_back(ws)
    with copy_lock(repo):
        try:
            refresh(repo, ws.base_branch)
        except workspace.WorkspaceError as exc:
            return workspace.MergeResult(False, f"fetch from {repo.remote} failed: {exc}", workspace.commits_since(ws))
        merged = workspace.merge_back(ws)
        if not merged.merged:
            return merged
        try:
            _git(repo.path, "push", "--quiet", "origin", f"refs/heads/{ws.base_branch}:refs/heads/{ws.base_branch}",
                 timeout=REMOTE_TIMEOUT_S)
        except workspace.WorkspaceError as exc:
            _git(repo.path, "checkout", "--quiet", "--force", "-B", ws.base_branch,
                 f"refs/remotes/origin/{ws.base_branch}")
            log.warning("repository_push_failed", remote=repo.remote, branch=ws.branch, error=str(exc))
            return workspace.MergeResult(False, f"push to {repo.remote} failed: {exc}", merged.commits)
    log.info("repository_pushed", remote=repo.remote, base=ws.base_branch, branch=ws.branch)
    return merged


@contextmanager
def deployable(repo: Repository, branch: str, root: Path, owner: RunAs, wait_s: float = LOCK_TIMEOUT_S
               ) -> Iterator[Path]:
    """Where `./deploy` runs: a fresh checkout of its own, `<root>/<random>/checkout`, of
    `branch` as the repository has it (for a remote, as this host's copy was brought to it),
    owned by the deploy user (`owner`) in a directory it alone writes; removed after. Copied
    without hard links (a chown must not reach the repository's own objects), without the
    repository's hooks or configuration. The copy's lock is held while it is made only."""
    with copy_lock(repo, wait_s):
        refresh(repo, branch)
        workdir = Path(tempfile.mkdtemp(prefix="deploy-", dir=workspace.traversable_dir(root)))
        workdir.chmod(0o711)  # the deploy user reaches its checkout by name, lists nothing else
        checkout = workdir / "checkout"
        try:
            _git(workdir, "clone", "--quiet", "--no-hardlinks", "--single-branch", "--branch", branch, "--",
                 str(repo.path), str(checkout))
        except workspace.WorkspaceError:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
    try:
        workspace.chown_tree(checkout, owner)
        os.lchown(checkout, owner.uid, owner.gid)
        yield checkout
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _in_checkout(checkout: Path, *args: str) -> str:
    # the deploy's checkout is its user's: read as root, before anything of it ran
    return _git(checkout, "-c", "safe.directory=*", *args)


def head(checkout: Path, ref: str = "HEAD") -> str:
    return _in_checkout(checkout, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def _known(checkout: Path, sha: str | None) -> str | None:
    """`sha` when this history holds that commit (a force-push may have dropped it)."""
    if not sha:
        return None
    try:
        return sha if _in_checkout(checkout, "cat-file", "-t", sha) == "commit" else None
    except workspace.WorkspaceError:
        return None


def changed(checkout: Path, baseline: str | None, paths: list[str]) -> list[str]:
    """Which of `paths` differ between `baseline` and HEAD (every one present, with no baseline
    or one this history does not hold: nothing was ever accepted to compare with)."""
    base = _known(checkout, baseline)
    if base is None:
        return _in_checkout(checkout, "ls-files", "--", *paths).splitlines()
    return _in_checkout(checkout, "diff", "--name-only", base, "HEAD", "--", *paths).splitlines()


def diff(checkout: Path, baseline: str | None, paths: list[str]) -> str:
    """The patch of `paths` from `baseline` (the empty tree when unknown) to HEAD."""
    base = _known(checkout, baseline) or _in_checkout(checkout, "hash-object", "-t", "tree", "/dev/null")
    return _in_checkout(checkout, "diff", "--no-color", "--no-ext-diff", base, "HEAD", "--", *paths)
