"""What a launch changed (synedre/spawn/changes.py) on real git repositories: the files with
their lines added and removed, the patch redacted line for line (a secret gone, the patch
still applying with `git apply --check` where the agent started), cut at a hunk boundary."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from synedre.redact import Redactor
from synedre.spawn import changes, workspace
from tests.services.stack import git

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dcQ"
KEY_BODY = ["MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
            "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK"]
PEM = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *KEY_BODY, "-----END RSA PRIVATE KEY-----"]) + "\n"


def write(repo: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)
    git(repo, "add", "-A")


def branch_of(tmp_path: Path, base: dict[str, str | bytes], agent: list[dict[str, str | bytes]]
              ) -> workspace.Workspace:
    """A repository at `base` on `main`, and the agent's branch with one commit per `agent` item."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo, base)
    git(repo, "commit", "-qm", "base")
    start = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-qb", "synedre/msg-1-a1")
    for n, files in enumerate(agent):
        write(repo, files)
        git(repo, "commit", "-qm", f"change {n + 1}")
    git(repo, "checkout", "-q", "main")
    return workspace.Workspace(path=repo, branch="synedre/msg-1-a1", repo=repo, base_branch="main", base_sha=start)


def applies(ws: workspace.Workspace, patch: bytes, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "x.patch"
    path.write_bytes(patch)
    return subprocess.run(["git", "-C", str(ws.repo), "apply", "--check", str(path)], capture_output=True, text=True,
                          timeout=30)


def test_three_files_with_their_counts_and_a_key_block_and_a_token_redacted_line_for_line(tmp_path):
    ws = branch_of(tmp_path, {"a.txt": "one\ntwo\nthree\n", "b.txt": "x\n"},
                   [{"a.txt": "one\nTWO\nthree\n", "key.pem": PEM}, {"b.txt": f"x\nstripe = '{STRIPE}'\n"}])
    found = changes.of_branch(ws, Redactor(), 200_000)
    assert found is not None
    assert [(f["path"], f["added"], f["removed"]) for f in found.files] == [
        ("a.txt", 1, 1), ("b.txt", 1, 0), ("key.pem", 4, 0)]
    assert [s for _, s in found.commits] == ["change 1", "change 2"] and found.branch == "synedre/msg-1-a1"
    assert found.head == git(ws.repo, "rev-parse", "synedre/msg-1-a1") and found.base == ws.base_sha
    text = found.patch.decode()
    assert STRIPE not in text and not any(line in text for line in KEY_BODY), text
    raw = git(ws.repo, "diff", ws.base_sha, found.head)
    assert len(text.splitlines()) == len(raw.splitlines())  # the same lines, hunks and counts
    assert "+[REDACTED:private_key]" in text and "+stripe = '[REDACTED:stripe_key]'" in text
    assert not found.altered and not found.left_out and found.patch_bytes == len(raw.encode()) + 1
    git(ws.repo, "checkout", "-q", ws.base_sha)
    assert applies(ws, found.patch, tmp_path).returncode == 0


def test_a_secret_in_a_line_of_the_base_is_hidden_and_the_patch_says_it_no_longer_applies(tmp_path):
    ws = branch_of(tmp_path, {"conf.env": f"STRIPE={STRIPE}\nA=1\n"}, [{"conf.env": f"STRIPE={STRIPE}\nA=2\n"}])
    found = changes.of_branch(ws, Redactor(), 200_000)
    assert found is not None and found.altered and STRIPE not in found.patch.decode()


def test_the_cut_keeps_whole_hunks_and_files_names_the_rest_and_still_applies(tmp_path):
    big = "".join(f"line {i}\n" for i in range(400))
    edited = big.replace("line 10\n", "line ten\n").replace("line 200\n", "line two hundred\n") \
        .replace("line 390\n", "line three hundred ninety\n")
    ws = branch_of(tmp_path, {"a.txt": big, "b.txt": "b\n"}, [{"a.txt": edited, "b.txt": "b\nc\n"}])
    whole = changes.of_branch(ws, Redactor(), 200_000)
    assert whole is not None and not whole.left_out
    parts = changes.units(whole.patch)
    assert [u.path for u in parts] == ["a.txt", "a.txt", "a.txt", "b.txt"]  # the header goes with its first hunk
    limit = len(b"".join(b"".join(u.lines) for u in parts[:2])) + 10
    found = changes.of_branch(ws, Redactor(), limit)
    assert found is not None and found.left_out == ["a.txt", "b.txt"] and 0 < len(found.patch) <= limit
    assert found.patch_bytes == whole.patch_bytes and found.files == whole.files  # the table stays whole
    text = found.patch.decode()
    assert "+line two hundred" in text and "three hundred ninety" not in text and "b.txt" not in text
    git(ws.repo, "checkout", "-q", ws.base_sha)
    assert applies(ws, found.patch, tmp_path).returncode == 0
    none = changes.of_branch(ws, Redactor(), 50)  # not even the first hunk fits: no patch at all
    assert none is not None and none.patch == b"" and none.left_out == ["a.txt", "b.txt"]


def test_a_latin1_file_and_a_binary_file_and_no_final_newline(tmp_path):
    ws = branch_of(tmp_path, {"l1.txt": "café\n".encode("latin-1"), "n.txt": "a"},
                   [{"l1.txt": "café\nthé\n".encode("latin-1"), "n.txt": "a\nb", "logo.png": b"\x89PNG\r\n\x1a\n\0\1"}])
    found = changes.of_branch(ws, Redactor(), 200_000)
    assert found is not None and found.binary
    assert [(f["path"], f["added"]) for f in found.files] == [("l1.txt", 1), ("logo.png", None), ("n.txt", 2)]
    assert "thé\n".encode("latin-1") in found.patch and b"\\ No newline at end of file" in found.patch
    assert b"Binary files /dev/null and b/logo.png differ" in found.patch


def test_a_branch_with_nothing_new_has_no_changes(tmp_path):
    ws = branch_of(tmp_path, {"a.txt": "a\n"}, [])
    assert changes.of_branch(ws, Redactor(), 200_000) is None
