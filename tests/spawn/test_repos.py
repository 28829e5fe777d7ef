"""A tenant's repository on this host (issue 16, item 3), against real git: a local path is
used in place; a remote (a bare repository through file://) is mirrored per host, the merge
goes onto the remote's latest pre-production branch and is pushed back, a refused push is a
failed merge, and the deploy checkout of another host runs what was pushed."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from synedre.config import Settings
from synedre.spawn import launcher, repos, workspace
from tests.services.stack import git

pytestmark = pytest.mark.timeout(60)


def commit(cwd: Path, name: str, message: str) -> str:
    (cwd / name).write_text(message + "\n")
    git(cwd, "add", name)
    git(cwd, "commit", "-qm", message)
    return git(cwd, "rev-parse", "HEAD")


@pytest.fixture
def remote(tmp_path) -> str:
    """A bare repository with a `preprod` branch, as an agency's git server has it."""
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "preprod")
    commit(seed, "README", "the client's site")
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True, timeout=30)
    return f"file://{bare}"


def host(tmp_path: Path, name: str) -> Settings:
    return Settings(state_dir=tmp_path / name, workspace_base_branch="preprod")


def agent_commits(ws: workspace.Workspace, name: str) -> str:
    sha = commit(ws.path, name, f"agent: {name}")
    assert workspace.collect(ws) is None
    return sha


def remote_log(remote: str) -> list[str]:
    return git(Path(remote.removeprefix("file://")), "log", "--format=%s", "preprod").splitlines()


def test_a_remote_is_mirrored_and_the_merge_onto_its_latest_branch_is_pushed_back(tmp_path, remote):
    s = host(tmp_path, "spawn-host")
    repo = repos.locate(remote, s)
    assert repo is not None and repo.remote == remote and repo.path.parent == (s.state_dir / "mirrors").resolve()
    ws = repos.open_workspace(repo, base_branch="preprod", name="msg-1-a1", root=tmp_path / "clones")
    assert git(ws.path, "remote") == ""  # the agent's clone knows neither the mirror nor the remote
    agent_commits(ws, "fix.txt")
    # meanwhile another host pushed to the remote: the merge goes on top of it, not over it
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", "--branch", "preprod", remote, str(other)], check=True, timeout=30)
    commit(other, "other.txt", "someone else's change")
    git(other, "push", "-q", "origin", "preprod")
    merged = repos.merge_back(ws, s)
    assert merged.merged and merged.reason == "merge commit", merged
    pushed = remote_log(remote)
    assert pushed[0] == "Merge synedre/msg-1-a1 into preprod"
    assert {"someone else's change", "agent: fix.txt"} <= set(pushed)
    assert git(repo.path, "rev-parse", "preprod") == git(Path(remote[7:]), "rev-parse", "preprod")
    assert workspace.close_workspace(ws)
    # the next launch starts from what the remote holds
    again = repos.open_workspace(repo, base_branch="preprod", name="msg-2-a1", root=tmp_path / "clones")
    assert {"fix.txt", "other.txt"} <= {p.name for p in again.path.iterdir()}


def test_a_refused_push_is_a_failed_merge_and_the_mirror_keeps_only_what_the_remote_has(tmp_path, remote):
    s = host(tmp_path, "spawn-host")
    repo = repos.locate(remote, s)
    assert repo is not None
    ws = repos.open_workspace(repo, base_branch="preprod", name="msg-1-a1", root=tmp_path / "clones")
    sha = agent_commits(ws, "fix.txt")
    hook = Path(remote[7:]) / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected branch' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = git(Path(remote[7:]), "rev-parse", "preprod")
    merged = repos.merge_back(ws, s)
    assert merged.failed and merged.reason.startswith(f"push to {remote} failed: ")
    assert "protected branch" in merged.reason
    assert [c.split()[0] for c in merged.commits] == [sha]
    assert git(Path(remote[7:]), "rev-parse", "preprod") == before
    assert git(repo.path, "rev-parse", "preprod") == before  # the merge was undone in the mirror
    assert git(repo.path, "rev-parse", ws.branch) == sha  # the agent's work kept on its branch
    assert workspace.close_workspace(ws) and git(repo.path, "rev-parse", ws.branch) == sha  # not merged: kept


def test_a_deploy_on_another_host_runs_what_was_pushed(tmp_path, remote):
    spawn, deploy = host(tmp_path, "spawn-host"), host(tmp_path, "deploy-host")
    checkout = repos.locate(remote, deploy, repos.CHECKOUTS)
    assert checkout is not None
    owner = launcher.RunAs.lookup("synedre-deploy")
    with repos.deployable(checkout, "preprod", deploy.state_dir / "deploys", owner) as path:  # first: cloned
        assert not (path / "fix.txt").exists() and path.stat().st_uid == owner.uid
        (path / "build.log").write_text("a deploy's leftovers\n")
    assert not path.exists()  # each deploy's checkout is its own, removed after
    mirror = repos.locate(remote, spawn)
    assert mirror is not None
    ws = repos.open_workspace(mirror, base_branch="preprod", name="msg-1-a1", root=tmp_path / "clones")
    sha = agent_commits(ws, "fix.txt")
    assert repos.merge_back(ws, spawn).merged
    with repos.deployable(checkout, "preprod", deploy.state_dir / "deploys", owner) as path:  # then: fetched
        assert checkout.path == (deploy.state_dir / "checkouts").resolve() / checkout.path.name
        assert repos.head(path) == sha and (path / "fix.txt").exists() and not (path / "build.log").exists()
    assert not str(path).startswith(str(spawn.state_dir))


def test_a_local_path_is_used_in_place_and_the_default_stays_the_fleet_repository(tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    git(local, "init", "-q", "-b", "preprod")
    commit(local, "README", "init")
    s = Settings(state_dir=tmp_path / "state", workspace_base_branch="preprod", workspace_repo=tmp_path / "mono")
    assert repos.locate(str(local), s) == repos.Repository(local)
    assert repos.locate(None, s) == repos.Repository(tmp_path / "mono")
    assert repos.locate(None, host(tmp_path, "bare")) is None
    ws = repos.open_workspace(repos.Repository(local), base_branch="preprod", name="msg-1-a1",
                              root=tmp_path / "clones")
    sha = agent_commits(ws, "fix.txt")
    assert repos.merge_back(ws, s).merged and git(local, "rev-parse", "preprod") == sha
    assert not (tmp_path / "state" / "mirrors").exists()


def test_an_unreachable_remote_fails_without_prompting(tmp_path):
    s = host(tmp_path, "spawn-host")
    repo = repos.locate(f"file://{tmp_path}/nowhere.git", s)
    assert repo is not None
    with pytest.raises(workspace.WorkspaceError, match="git clone"):
        repos.open_workspace(repo, base_branch="preprod", name="msg-1-a1", root=tmp_path / "clones")
    assert not repo.path.exists()
