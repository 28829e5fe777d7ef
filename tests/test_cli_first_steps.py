"""The README's path to production on a fresh clone (issue 19, acceptance 5 and 6): its commands,
as written, create the embedded database and import the shipped directory example; a
command run from another directory finds that same database, and one pointed at a state
directory without a database stops with a clear line instead of creating an empty one."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.services import stack

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


def first_steps() -> list[list[str]]:
    """The `.venv/bin/synedre …` lines of the README's path to production (its code block that
    creates the database), as argv."""
    block = next(b for b in re.findall(r"```sh\n(.*?)```", (stack.ROOT / "README.md").read_text(), re.S)
                 if ".venv/bin/synedre db upgrade" in b)
    return [line.split("#")[0].split()[1:] for line in block.splitlines() if line.startswith(".venv/bin/synedre ")]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of the committed tree, its embedded database stopped at the end."""
    where = tmp_path_factory.mktemp("first-steps") / "synedre"
    subprocess.run(["git", "clone", "-q", str(stack.ROOT), str(where)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("SYNEDRE_DATABASE_URL", "SYNEDRE_STATE_DIR")}
    env["PYTHONPATH"] = str(where)  # the clone's code, whichever directory a command runs from
    yield where, env
    subprocess.run([sys.executable, "-m", "synedre.cli", "db", "stop"], env=env, cwd=where, capture_output=True,
                   timeout=60)


def synedre(argv: list[str], env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synedre.cli", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=180)


def test_the_readme_first_steps_import_the_shipped_directory_example_on_a_fresh_clone(clone):
    where, env = clone
    steps = first_steps()
    assert steps == [["db", "upgrade"], ["directory", "import", "directory.example.json"]]
    for argv in steps:
        out = synedre(argv, env, where)
        assert out.returncode == 0, (argv, out.stdout, out.stderr)
    assert out.stdout == ("imported directory.example.json: founder Julien Moreau, 2 clients, 3 persons,"
                          " 1 tenants, 1 chantiers\n")
    again = synedre(steps[1], env, where)  # importing again updates, never duplicates
    assert again.returncode == 0 and again.stdout == out.stdout
    shown = synedre(["directory", "show"], env, where)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("founder: Julien Moreau <julien@atelier-moreau.example>")
    assert [line.split()[0] for line in lines if line.startswith(("boulangerie", "garage", "dupont"))] == \
        ["boulangerie-dupont", "garage-martin", "dupont-site-vitrine"]  # each client and chantier once
    assert "https://preprod.boulangerie-dupont.example" in shown.stdout  # the tenant's pre-production


def test_a_command_from_another_directory_finds_the_same_database_or_stops_clearly(clone, tmp_path):
    where, env = clone
    assert synedre(["db", "upgrade"], env, where).returncode == 0
    assert synedre(["directory", "import", "directory.example.json"], env, where).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for state in (None, ".synedre"):  # the default, and a relative value: both the clone's
        run_env = env if state is None else {**env, "SYNEDRE_STATE_DIR": state}
        shown = synedre(["directory", "show"], run_env, elsewhere)
        assert shown.returncode == 0 and "founder: Julien Moreau" in shown.stdout, shown.stderr
    assert not (elsewhere / ".synedre").exists()

    other = {**env, "SYNEDRE_STATE_DIR": str(tmp_path / "other")}
    stopped = synedre(["inspect", "--all"], other, elsewhere)
    assert stopped.returncode == 3 and stopped.stdout == ""
    assert stopped.stderr == (f"error: no database in {tmp_path / 'other' / 'pgdata'} (SYNEDRE_STATE_DIR="
                              f"{tmp_path / 'other'}): `synedre db upgrade` creates it; or point"
                              " SYNEDRE_STATE_DIR at the existing one, or SYNEDRE_DATABASE_URL at a server\n")
    assert not (tmp_path / "other").exists()  # nothing created
