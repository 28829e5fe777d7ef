"""Shared by the tests that run the real `claude` CLI in a scratch repository."""
import subprocess
from pathlib import Path

import pytest


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("scratch repo\n")
    git(path, "add", "README.md")
    git(path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "init")
    return path
