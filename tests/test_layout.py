"""The house's shape holds: import layers with no stair back up, short functions, one name
per public type (issue 15)."""
import ast
import collections
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MODULES = sorted(ROOT.glob("synedre/**/*.py"))


def lint_imports(where: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(where / "pyproject.toml")],
                          cwd=where, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(240)
def test_an_upward_import_breaks_the_layer_contracts(tmp_path):
    assert LINT_IMPORTS.exists(), "import-linter is not installed in this venv (make venv)"
    # That the tree keeps them is `make lint`'s (lint-imports runs there, not here); this
    # proves they would catch a stair back up: the ground (config) importing a stage.
    for name in ("synedre", "tasks"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    config = tmp_path / "synedre" / "config.py"
    config.write_text(config.read_text() + "\n\ndef _up():\n    from synedre.stages import scan  # noqa\n")
    broken = lint_imports(tmp_path)
    assert broken.returncode != 0 and "BROKEN" in broken.stdout, broken.stdout + broken.stderr
    assert "synedre.config -> synedre.stages.scan" in broken.stdout


def test_no_function_is_longer_than_sixty_lines():
    long = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in MODULES for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.end_lineno - n.lineno + 1 > 60]
    assert long == []


def test_no_two_public_types_share_a_name():
    where = collections.defaultdict(list)
    for p in MODULES:
        for n in ast.parse(p.read_text()).body:
            if isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                where[n.name].append(str(p.relative_to(ROOT)))
    assert {name: places for name, places in where.items() if len(places) > 1} == {}


def test_one_module_per_stage_named_after_it_and_one_pipeline_module():
    from synedre.pipeline import STAGES

    stages = {p.stem for p in (ROOT / "synedre" / "stages").glob("*.py") if p.stem != "__init__"}
    # qa_route is the qa stage's second half (one task per route), in the same module
    assert stages == {s.name for s in STAGES} - {"qa_route"}
    assert [p.relative_to(ROOT).as_posix() for p in MODULES if p.stem == "pipeline"] == ["synedre/pipeline.py"]
