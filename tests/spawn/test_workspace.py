"""The agent's own clone for each launch (SPEC §8 Workspace), against real git repositories:
no worktree, no trunk fallback, and the branch comes back only through `collect`."""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from synedre.spawn import launcher, workspace
from synedre.spawn.workspace import (
    MergeResult,
    WorkspaceError,
    close_workspace,
    collect,
    commits_since,
    committed_paths,
    merge_back,
    open_workspace,
    private_dir,
    private_file,
    private_files,
    prune_stale,
    read_file,
    repo_lock,
)
from tests.services.stack import git

pytestmark = pytest.mark.timeout(60)


def commit(cwd: Path, filename: str, text: str, message: str) -> None:
    (cwd / filename).write_text(text)
    git(cwd, "add", filename)
    git(cwd, "commit", "-q", "-m", message)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "app"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "preprod")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.org")
    commit(repo, "README", "hello\n", "initial")
    return repo


@pytest.fixture(autouse=True)
def _author(monkeypatch):  # a clone has no user.name of its own
    for k, v in {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "A",
                 "GIT_COMMITTER_EMAIL": "a@x"}.items():
        monkeypatch.setenv(k, v)


def open_ws(repo: Path, name: str = "msg-1", **kw):
    return open_workspace(repo, base_branch="preprod", name=name, root=kw.pop("root", repo.parent / "clones"), **kw)


def collected(ws):
    """The branch brought back from the clone, as the stage does after the run."""
    assert collect(ws) is None
    return ws


def test_opens_a_clone_with_its_own_git_directory_on_a_new_branch_from_preprod(repo):
    ws = open_ws(repo)
    assert ws.branch == "synedre/msg-1"
    assert ws.path == repo.parent / "clones" / "app" / "msg-1"
    assert Path(git(ws.path, "rev-parse", "--path-format=absolute", "--git-common-dir")) == ws.path / ".git"
    assert git(ws.path, "remote") == "" and git(repo, "worktree", "list").count("\n") == 0
    assert git(ws.path, "rev-parse", "--abbrev-ref", "HEAD") == "synedre/msg-1"
    assert git(ws.path, "rev-parse", "HEAD") == git(repo, "rev-parse", "preprod")
    assert (ws.path / "README").read_text() == "hello\n"


def test_agent_commit_is_merged_back_into_a_clean_trunk(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "fix the thing")
    result = merge_back(collected(ws))
    assert result.merged and result.reason == "fast-forward"
    assert [c.split(" ", 1)[1] for c in result.commits] == ["fix the thing"]
    assert git(repo, "log", "-1", "--format=%s", "preprod") == "fix the thing"
    assert (repo / "fix.py").read_text() == "x = 1\n"


def test_diverged_trunk_gets_a_merge_commit(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "fix the thing")
    commit(repo, "other.py", "y = 2\n", "meanwhile on preprod")
    result = merge_back(collected(ws))
    assert result.merged and result.reason == "merge commit"
    assert len(git(repo, "log", "-1", "--format=%P").split()) == 2
    assert (repo / "fix.py").exists() and (repo / "other.py").exists()


def test_dirty_trunk_is_not_merged_and_the_commit_stays_on_its_branch(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "fix the thing")
    (repo / "README").write_text("founder editing by hand\n")
    before = git(repo, "rev-parse", "preprod")
    result = merge_back(collected(ws))
    assert not result.merged and "uncommitted changes" in result.reason
    assert git(repo, "rev-parse", "preprod") == before
    assert (repo / "README").read_text() == "founder editing by hand\n"  # never stashed
    assert git(repo, "log", "-1", "--format=%s", "synedre/msg-1") == "fix the thing"
    assert git(repo, "stash", "list") == ""


def test_conflicting_merge_is_aborted_and_leaves_the_trunk_as_it_was(repo):
    ws = open_ws(repo)
    commit(ws.path, "README", "agent\n", "agent edit")
    commit(repo, "README", "founder\n", "founder edit")
    before = git(repo, "rev-parse", "preprod")
    result = merge_back(collected(ws))
    assert not result.merged and "CONFLICT" in result.reason
    assert git(repo, "rev-parse", "preprod") == before
    assert git(repo, "status", "--porcelain") == "" and (repo / "README").read_text() == "founder\n"


def test_trunk_on_another_branch_is_not_merged(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "fix the thing")
    git(repo, "checkout", "-q", "-b", "hotfix")
    result = merge_back(collected(ws))
    assert not result.merged and "not on preprod" in result.reason


def test_nothing_to_merge_without_an_agent_commit(repo):
    result = merge_back(open_ws(repo))
    assert not result.merged and result.reason == "no commits to merge"


def test_close_removes_a_clean_worktree_and_a_merged_branch(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "fix the thing")
    assert merge_back(collected(ws)).merged
    assert close_workspace(ws) is True
    assert not ws.path.exists()
    assert git(repo, "branch", "--list", "synedre/msg-1") == ""


def test_close_keeps_an_unmerged_branch(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "fix the thing")
    assert close_workspace(collected(ws)) is True
    assert not ws.path.exists()
    assert git(repo, "log", "-1", "--format=%s", "synedre/msg-1") == "fix the thing"


@pytest.mark.parametrize("change", ["untracked", "modified"])
def test_close_keeps_a_dirty_clone(repo, change):
    ws = open_ws(repo)
    if change == "untracked":
        (ws.path / "notes.md").write_text("work in progress\n")
    else:
        (ws.path / "README").write_text("edited\n")
    assert close_workspace(ws) is False
    assert ws.path.exists() and git(ws.path, "status", "--porcelain")


def test_missing_base_branch_fails_instead_of_falling_back_to_the_trunk(repo):
    with pytest.raises(WorkspaceError, match="no-such-branch"):
        open_workspace(repo, base_branch="no-such-branch", name="msg-1", root=repo.parent / "clones")


def test_unusable_clone_root_fails_instead_of_falling_back_to_the_trunk(repo, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")  # a file: even root cannot create directories under it
    with pytest.raises(WorkspaceError):
        open_ws(repo, root=blocker)


def test_not_a_repository_fails(tmp_path):
    with pytest.raises(WorkspaceError):
        open_workspace(tmp_path, base_branch="preprod", name="msg-1", root=tmp_path / "clones")


def test_reopening_a_name_reuses_its_worktree_and_commits(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "first attempt")
    again = open_ws(repo)
    assert again.path == ws.path
    assert [c.split(" ", 1)[1] for c in commits_since(collected(again))] == ["first attempt"]


def _age(path: Path, seconds: float) -> None:
    admin = path / ".git"
    then = time.time() - seconds
    for p in (path, admin / "HEAD", admin / "index"):
        os.utime(p, (then, then))


def test_prune_stale_removes_old_clean_clones_only(repo):
    old_clean, old_dirty, fresh = (open_ws(repo, n) for n in ("old-clean", "old-dirty", "fresh"))
    (old_dirty.path / "wip.txt").write_text("unsaved\n")
    for ws in (old_clean, old_dirty):
        _age(ws.path, 3600)
    assert prune_stale(repo.parent / "clones", older_than_s=600) == [old_clean.path]
    assert not old_clean.path.exists()
    assert old_dirty.path.exists() and fresh.path.exists()


def test_repo_lock_excludes_a_second_holder(repo):
    with repo_lock(repo):
        with pytest.raises(WorkspaceError, match="lock busy"):
            with repo_lock(repo, timeout_s=0.2):
                pass
    with repo_lock(repo, timeout_s=0.2):
        pass


def _open_in_child(repo: str, name: str, barrier, results) -> None:
    barrier.wait()
    ws = open_workspace(Path(repo), base_branch="preprod", name=name, root=Path(repo).parent / "clones")
    results.put((name, ws.path.is_dir()))


def test_two_processes_open_workspaces_on_one_repo_at_once(repo):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open_in_child, args=(str(repo), f"msg-{i}", barrier, results))
             for i in (1, 2)]
    for p in procs:
        p.start()
    got = sorted(results.get(timeout=45) for _ in procs)
    for p in procs:
        p.join(timeout=10)
    assert got == [("msg-1", True), ("msg-2", True)]


def test_salvage_reads_commits_and_a_partial_contract(repo):
    ws = open_ws(repo)
    commit(ws.path, "a.py", "a\n", "step one")
    commit(ws.path, "b.py", "b\n", "step two")
    (ws.path / "contract.json").write_text('{"ok": false, "summary_md": "half')
    commits = commits_since(collected(ws))
    assert [c.split(" ", 1)[1] for c in commits] == ["step one", "step two"]
    assert commits[1].split(" ", 1)[0] == git(ws.path, "rev-parse", "HEAD")
    # what the spawn stage's salvage reads (workspace.read_file): the half-written text as it is
    assert read_file(ws.path / "contract.json") == '{"ok": false, "summary_md": "half'
    assert read_file(ws.path / "missing.json") is None
    assert read_file(ws.path / "contract.json", limit=8) == '{"ok": f'


def test_committed_paths_lists_what_the_agent_committed_even_if_removed_later(repo):
    ws = open_ws(repo)
    (ws.path / ".synedre").mkdir()
    commit(ws.path, ".synedre/contract.json", "{}", "with a contract")
    git(ws.path, "rm", "-q", ".synedre/contract.json")
    commit(ws.path, "odd name\twith tab.py", "x\n", "and a strange name")
    assert committed_paths(collected(ws)) == [".synedre/contract.json", "odd name\twith tab.py"]
    assert committed_paths(open_ws(repo, name="msg-2")) == []


def test_a_failed_runs_branch_is_kept_with_its_commits_when_not_merged(repo):
    trunk = git(repo, "rev-parse", "preprod")
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "unverified work")
    assert close_workspace(collected(ws))  # no merge_back: the verdict was not a success
    assert git(repo, "rev-parse", "preprod") == trunk and not (repo / "fix.py").exists()
    assert git(repo, "log", "-1", "--format=%s", "synedre/msg-1") == "unverified work"


def test_files_made_inside_private_files_are_private_and_the_umask_comes_back(tmp_path):
    before = os.umask(0o022)
    try:
        with private_files():
            d = private_dir(tmp_path / "a" / "b")
            f = private_file(d / "events.ndjson")
            (d / "plain.txt").write_text("x")
            subprocess.run(["sh", "-c", f"mkdir {d}/child && touch {d}/child/f"], check=True)
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(before)
    for path in (tmp_path / "a", d, d / "child"):
        assert path.stat().st_mode & 0o777 == 0o700, path
    for path in (f, d / "plain.txt", d / "child" / "f"):
        assert path.stat().st_mode & 0o777 == 0o600, path
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    assert private_dir(loose).stat().st_mode & 0o777 == 0o700  # an existing directory is tightened


def test_read_file_is_bounded_and_none_when_absent(tmp_path):
    (tmp_path / "c.json").write_text('{"ok": tr')
    assert read_file(tmp_path / "c.json") == '{"ok": tr'
    assert read_file(tmp_path / "c.json", limit=3) == '{"o'
    assert read_file(tmp_path / "missing.json") is None


AGENT = ["agent"] if os.geteuid() == 0 else []  # the agent's own OS user needs a root fleet


@pytest.mark.parametrize("owner", [None, *AGENT])
def test_a_hook_or_fsmonitor_planted_in_the_clone_never_runs_when_the_fleet_brings_the_commits_back(
        repo, owner):
    """What an agent that escaped its sandbox could plant in its own clone: the fleet's fetch,
    merge and clean-up run none of it, whether the clone is the agent user's (the fetch's
    serving side then runs as that user) or the fleet's own (hooks overridden)."""
    drop = Path(tempfile.mkdtemp(prefix="synedre-hook-"))  # /tmp: reachable by the agent's user too
    drop.chmod(0o1777)
    marker = drop / "planted-ran"
    ws = open_ws(repo, "hooked")
    commit(ws.path, "fix.txt", "fix\n", "agent fix")  # then it plants what would run later
    hooks = ws.path / ".git" / "planted-hooks"
    hooks.mkdir()
    script = f"#!/bin/sh\necho ran >> {marker}\n"
    for name in ("post-checkout", "post-merge", "reference-transaction", "pre-push", "post-commit",
                 "fsmonitor", "upload-pack"):
        for where in (hooks, ws.path / ".git" / "hooks"):
            (where / name).write_text(script)
            (where / name).chmod(0o755)
    with (ws.path / ".git" / "config").open("a") as fh:
        fh.write(f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {hooks}/fsmonitor\n")
    if owner is not None:  # the agent's clone, as the fleet finds it after the run
        agent = launcher.RunAs.lookup("synedre-agent")
        workspace.traversable_dir(ws.path.parent)
        workspace.chown_tree(ws.path, agent)
        ws = dataclasses.replace(ws, owner=agent)
    assert collect(ws) is None
    assert merge_back(ws).merged
    assert close_workspace(ws)
    assert git(repo, "log", "-1", "--format=%s", "preprod") == "agent fix"
    ran = marker.exists()
    shutil.rmtree(drop)
    assert not ran


def test_a_clone_whose_own_config_hides_untracked_files_is_kept_when_it_holds_some(repo):
    ws = collected(open_ws(repo))
    git(ws.path, "config", "status.showUntrackedFiles", "no")
    (ws.path / "notes").mkdir()
    (ws.path / "notes" / "draft.md").write_text("not committed\n")
    assert close_workspace(ws) is False and (ws.path / "notes" / "draft.md").exists()


def test_a_branch_that_never_came_back_is_not_merged_and_has_no_commits(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "never collected")
    assert merge_back(ws) == MergeResult(False, "no commits to merge", [])
    assert merge_back(ws).failed is False  # nothing of the agent's reached the trunk to fail


# Exact results of merge_back and collect, for the mutants that survived the mutation run
# (docs/mutation.md): the stage reads `merged`, `failed` and `commits` off the result, and the
# reason is what the founder's alert and `synedre launches` show.
def two_commits(repo):
    ws = open_ws(repo)
    commit(ws.path, "a.py", "a = 1\n", "first step")
    commit(ws.path, "b.py", "b = 2\n", "second step")
    log = git(ws.path, "log", "--reverse", "--format=%H %s", "preprod..HEAD").splitlines()
    return collected(ws), log


def test_a_collected_branch_without_commits_is_nothing_to_merge(repo):
    assert merge_back(collected(open_ws(repo))) == MergeResult(False, "no commits to merge", [])


@pytest.mark.parametrize("where,reason", [("hotfix", "trunk is not on preprod (hotfix)"),
                                          ("detached", "trunk is not on preprod (detached HEAD)")])
def test_a_trunk_off_its_branch_refuses_with_the_full_commits_oldest_first(repo, where, reason):
    ws, log = two_commits(repo)
    git(repo, "checkout", "-q", *(["-b", "hotfix"] if where == "hotfix" else ["--detach"]))
    assert merge_back(ws) == MergeResult(False, reason, log)
    assert [c.split(" ", 1)[1] for c in log] == ["first step", "second step"] and len(log[0].split()[0]) == 40


def test_a_dirty_trunk_refuses_with_the_commits(repo):
    ws, log = two_commits(repo)
    (repo / "README").write_text("founder editing\n")
    result = merge_back(ws)
    assert result == MergeResult(False, "trunk has uncommitted changes", log) and result.failed


def test_a_conflict_is_a_failed_merge_with_the_commits(repo):
    ws, log = two_commits(repo)
    commit(ws.path, "README", "agent\n", "agent edit")
    commit(repo, "README", "founder\n", "founder edit")
    log = git(ws.path, "log", "--reverse", "--format=%H %s", "preprod..HEAD").splitlines()
    result = merge_back(collected(ws))
    assert (result.merged, result.commits) == (False, log) and result.reason.startswith("merge failed: ")
    assert result.failed


def test_a_merge_that_fails_before_it_starts_is_reported_not_raised(repo):
    ws, log = two_commits(repo)
    (repo / ".git" / "index.lock").write_text("")  # another git process holds the trunk's index
    result = merge_back(ws)
    (repo / ".git" / "index.lock").unlink()
    assert (result.merged, result.commits) == (False, log) and "index.lock" in result.reason
    assert git(repo, "log", "-1", "--format=%s", "preprod") == "initial"


def test_a_fast_forward_stays_one_whatever_the_trunk_s_merge_config(repo):
    ws, log = two_commits(repo)
    git(repo, "config", "merge.ff", "false")
    assert merge_back(ws) == MergeResult(True, "fast-forward", log)
    assert git(repo, "rev-parse", "preprod") == log[-1].split()[0]  # no merge commit on top


def test_a_merge_commit_never_waits_for_an_editor(repo, monkeypatch):
    ws, log = two_commits(repo)
    commit(repo, "other.py", "y = 2\n", "meanwhile on preprod")
    monkeypatch.setenv("GIT_MERGE_AUTOEDIT", "yes")
    monkeypatch.setenv("GIT_EDITOR", "false")  # an editor that refuses: the merge would fail
    assert merge_back(ws) == MergeResult(True, "merge commit", log)


def test_collect_fetches_even_where_the_file_protocol_is_refused(repo, tmp_path, monkeypatch):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "fix")
    hardened = tmp_path / "gitconfig"
    hardened.write_text("[protocol \"file\"]\n\tallow = never\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(hardened))
    assert collect(ws) is None
    assert git(repo, "log", "-1", "--format=%s", "synedre/msg-1") == "fix"


def test_collect_says_why_it_could_not(repo):
    ws = open_ws(repo)
    shutil.rmtree(ws.path)
    why = collect(ws)
    assert why is not None and why.startswith("git -c protocol.file.allow=always fetch") and "exit" in why


def test_collect_brings_the_branch_and_no_tag_the_agent_made(repo):
    ws = open_ws(repo)
    commit(ws.path, "fix.py", "x = 1\n", "fix")
    git(ws.path, "tag", "v9.9.9")  # on the fetched commit: git would follow it without --no-tags
    git(ws.path, "tag", "-a", "-m", "agent", "release", "HEAD")
    assert collect(ws) is None
    assert git(repo, "tag", "--list") == ""
    assert git(repo, "log", "-1", "--format=%s", "synedre/msg-1") == "fix"


# -- what the fleet gives the agent to read (an iteration's mock-up diff image) --------------

def test_placed_files_are_readable_in_the_clone_and_never_committed(repo):
    ws = open_ws(repo)
    png = b"\x89PNG\r\n\x1a\n diff"
    workspace.place_files(ws, ((f"{workspace.FLEET_DIR}/check-7.diff.png", png),))

    assert (ws.path / workspace.FLEET_DIR / "check-7.diff.png").read_bytes() == png
    assert git(ws.path, "status", "--porcelain", "--untracked-files=all") == ""
    git(ws.path, "add", "-A")  # what an agent does before its commit
    assert git(ws.path, "diff", "--cached", "--name-only") == ""
    commit(ws.path, "fix.py", "x = 1\n", "fix the thing")
    assert merge_back(collected(ws)).merged
    assert not (repo / workspace.FLEET_DIR).exists()
    assert git(repo, "ls-tree", "-r", "--name-only", "preprod").split() == ["README", "fix.py"]


def test_placing_never_writes_through_what_the_agent_planted(repo, tmp_path):
    ws = open_ws(repo)
    outside = tmp_path / "fleet-file"
    outside.write_text("the fleet's")
    (ws.path / workspace.FLEET_DIR).symlink_to(tmp_path)  # a reused clone: the agent's directory
    workspace.place_files(ws, ((f"{workspace.FLEET_DIR}/fleet-file", b"png"),))
    assert outside.read_text() == "the fleet's" and not (ws.path / workspace.FLEET_DIR).is_symlink()

    os.link(outside, ws.path / workspace.FLEET_DIR / "linked.png")  # a hard link to a fleet file
    workspace.place_files(ws, ((f"{workspace.FLEET_DIR}/linked.png", b"png"),))
    assert outside.read_text() == "the fleet's"
    assert (ws.path / workspace.FLEET_DIR / "linked.png").read_bytes() == b"png"

    with pytest.raises(WorkspaceError, match="not a file name"):
        workspace.place_files(ws, (("../escape.png", b"x"),))
    (ws.path / ".git" / "info" / "exclude").write_text("")  # a clone made before FLEET_DIR was excluded
    with pytest.raises(WorkspaceError, match="not excluded"):
        workspace.place_files(ws, ((f"{workspace.FLEET_DIR}/a.png", b"x"),))
