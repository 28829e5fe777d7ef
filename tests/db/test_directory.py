"""`synedre directory import`: idempotent upserts, clear errors."""
import json
import subprocess
import sys

import psycopg

from tests.conftest import CORPUS
from tests.services import stack


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=stack.ROOT, env=env)


def counts(url):
    with psycopg.connect(url) as conn:
        return [conn.execute(f"SELECT count(*) FROM synedre.{t}").fetchone()[0]
                for t in ("founder", "clients", "client_persons", "chantiers", "tenant_topology")]


def test_reimport_updates_and_never_duplicates(db, tmp_path):
    import os
    env = dict(os.environ)
    assert run_cli("directory", "import", str(CORPUS / "directory.json"), env=env).returncode == 0
    assert counts(db) == [1, 3, 4, 1, 3]
    changed = json.loads((CORPUS / "directory.json").read_text())
    changed["clients"][0]["mrr"] = 999
    path = tmp_path / "dir.json"
    path.write_text(json.dumps(changed))
    assert run_cli("directory", "import", str(path), env=env).returncode == 0
    assert counts(db) == [1, 3, 4, 1, 3]
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT mrr FROM synedre.clients WHERE codename = 'boulangerie-dupont'"
                            ).fetchone()[0] == 999
        assert conn.execute("SELECT c.codename FROM synedre.chantiers h JOIN synedre.clients c"
                            " ON c.id = h.client_id").fetchone()[0] == "boulangerie-dupont"


def test_a_chantier_for_an_unknown_client_is_refused_with_a_clear_error(db, tmp_path):
    import os
    bad = json.loads((CORPUS / "directory.json").read_text())
    bad["chantiers"][0]["client"] = "nobody"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    out = run_cli("directory", "import", str(path), env=dict(os.environ))
    assert out.returncode == 1 and "nobody" in out.stderr
    assert counts(db) == [0, 0, 0, 0, 0]  # nothing partial from this file
