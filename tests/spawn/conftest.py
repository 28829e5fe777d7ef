"""Shared by the tests that run the real `claude` CLI in a scratch repository."""
import subprocess
from pathlib import Path

import pytest

from tests.services.claude_api import ClaudeAPI, ScriptedModel, start_claude_api


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


@pytest.fixture
def api_factory():
    """`make(model)`: a scripted Messages API, stopped at teardown."""
    started: list[ClaudeAPI] = []

    def make(model: ScriptedModel) -> ClaudeAPI:
        api = start_claude_api(model)
        started.append(api)
        return api

    yield make
    for api in started:
        api.stop()
