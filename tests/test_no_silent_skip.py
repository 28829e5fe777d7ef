"""Under CI=true a test that would skip for a missing tool fails instead, naming the tool
(issue 29): with `bwrap` hidden from the PATH, the sandbox's tests fail, they do not skip."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import stack

pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]  # it runs pytest itself


def _path_without(tool: str, where: Path) -> str:
    """The PATH's directories, each mirrored in `where` by links to everything but `tool`."""
    dirs = []
    for i, d in enumerate(p for p in os.environ["PATH"].split(os.pathsep) if p and Path(p).is_dir()):
        mirror = where / str(i)
        mirror.mkdir()
        for entry in Path(d).iterdir():
            if entry.name != tool and not (mirror / entry.name).exists():
                (mirror / entry.name).symlink_to(entry)
        dirs.append(str(mirror))
    return os.pathsep.join(dirs)


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_missing_tool_fails_the_suite_under_ci_and_only_skips_elsewhere(tmp_path, ci):
    env = {**os.environ, "PATH": _path_without("bwrap", tmp_path), "CI": ci}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
                          f"--basetemp={tmp_path / 'bt'}", "tests/spawn/test_sandbox.py"],
                         cwd=stack.ROOT, env=env, capture_output=True, text=True, timeout=100)
    if ci:
        # a skipif is decided at setup: pytest reports the setup's failure as an error
        assert out.returncode == 1 and "bubblewrap is not installed" in out.stdout and " error" in out.stdout, \
            out.stdout[-3000:]
        assert "would skip, and CI=true tests everything" in out.stdout
    else:
        assert out.returncode == 0 and " skipped" in out.stdout, out.stdout[-3000:]
        assert "failed" not in out.stdout and " error" not in out.stdout
