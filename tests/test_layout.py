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
    stages |= {p.parent.name for p in (ROOT / "synedre" / "stages").glob("*/__init__.py")}  # spawn: a package
    # qa_route is the qa stage's second half (one task per route), in the same module
    assert stages == {s.name for s in STAGES} - {"qa_route"}
    assert [p.relative_to(ROOT).as_posix() for p in MODULES if p.stem == "pipeline"] == ["synedre/pipeline.py"]


# -- one stage contract (issue 29) ------------------------------------------------------------

STAGE_FILES = sorted((ROOT / "synedre" / "stages").glob("**/*.py"))
# What a stage module may name of the runner: the runner itself, its contract and its typed
# values. Every door (a status write, a claim, a release) is the runner's to call.
RUNNER_FOR_STAGES = {"run", "StageCode", "Claim", "Done", "Held", "Skip", "Result"}
# Ingestion creates the message: no stage has it yet, so nothing can claim it; its door is its own.
INGESTION = {("synedre/stages/poll.py", "admit")}


def runner_names_used(path: Path) -> set[str]:
    """Each name a module takes from the runner: `runner.X`, `from synedre.runner(.doors) import X`."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "runner":
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("synedre.runner"):
            names |= {f"{node.module}.{a.name}" if node.module != "synedre.runner" else a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("synedre.runner.")}
    return names


def test_the_detector_sees_every_way_a_stage_could_reach_a_door(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from synedre import runner\nfrom synedre.runner import move\n"
                     "from synedre.runner.doors import claim\nimport synedre.runner.doors\n"
                     "runner.finish_launch(c)\nrunner.run(x, 1)\n")
    assert runner_names_used(probe) - RUNNER_FOR_STAGES == {
        "move", "synedre.runner.doors.claim", "synedre.runner.doors", "finish_launch"}


def test_no_stage_calls_a_runner_door_but_through_the_contract():
    offenders = {(p.relative_to(ROOT).as_posix(), name) for p in STAGE_FILES
                 for name in runner_names_used(p) - RUNNER_FOR_STAGES}
    assert offenders - INGESTION == set()


def test_every_stage_is_a_stage_object_with_load_work_and_write():
    import importlib
    import inspect
    import pkgutil

    import synedre.stages
    from synedre import runner
    from synedre.pipeline import STAGES

    codes = []
    for info in pkgutil.walk_packages(synedre.stages.__path__, "synedre.stages."):
        module = importlib.import_module(info.name)
        codes += [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, runner.StageCode)
                  and c.__module__ == info.name and not inspect.isabstract(c)]
    for code in codes:  # each method its own or a shared base's in the stage's own package, none abstract
        for method in ("load", "work", "write"):
            owner = next(k for k in code.__mro__ if method in vars(k))
            assert owner.__module__.startswith("synedre.stages."), (code, method)
    # every stage a message enters (not ingestion, which creates it) is run by such an object
    assert {s.name for s in STAGES if s.entry} <= {c.stage.name for c in codes}


def test_no_module_is_over_400_lines_and_the_spawn_stage_under_250():
    long = {p.relative_to(ROOT).as_posix(): n for p in MODULES if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
    assert len((ROOT / "synedre" / "stages" / "spawn" / "__init__.py").read_text().splitlines()) < 250
