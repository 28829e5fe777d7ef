"""`synedre directory import`: idempotent upserts, clear errors."""
import json
import subprocess
import sys

import psycopg
import pytest

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


# ---- a tenant's repository (issue 16, items 2 and 3) ----------------------------------

def _with_tenant(**tenant):
    d = json.loads((stack.ROOT / "directory.example.json").read_text())
    d["clients"][1].update(tenant)
    return d


@pytest.mark.parametrize("repo", [
    "/srv/git/garage-martin", "file:///srv/git/garage-martin.git", "ssh://git@git.example:2222/garage.git",
    "git://git.example/garage.git", "https://git.example/agency/garage.git", "git@git.example:agency/garage.git",
    "https://deploy@git.example/agency/garage.git"])
def test_a_repository_is_an_absolute_path_or_a_git_url(repo):
    from synedre.db.directory import parse_file

    d = parse_file(json.dumps(_with_tenant(deploy_target="garage", repo=repo)).encode())
    assert d.clients[1].repo == repo


@pytest.mark.parametrize("repo, why", [
    ("garage-martin", "a repository is an absolute path or a git URL"),
    ("./repos/garage", "a repository is an absolute path or a git URL"),
    ("~/git/garage", "a repository is an absolute path or a git URL"),
    ("ext::sh -c touch% /tmp/pwned", "a 'transport::' address is refused"),
    ("-uhelp", "a leading '-'"),
    ("https://deploy:hunter2@git.example/garage.git", "a password in the repository URL is refused"),
    ("ftp://git.example/garage.git", "scheme is one of file, ssh, git, https, http"),
    ("file://host/srv/garage.git", "a file:// repository URL names an absolute path"),
    ("https:///garage.git", "a repository URL names its host"),
    (" /srv/git/garage", "without surrounding spaces"),
])
def test_a_refused_repository_names_the_client_and_the_field(repo, why):
    from synedre.db.directory import DirectoryError, parse_file

    with pytest.raises(DirectoryError) as refused:
        parse_file(json.dumps(_with_tenant(deploy_target="garage", repo=repo)).encode())
    said = str(refused.value)
    assert said.startswith("clients[1].repo: garage-martin: ") and why in said, said
    assert "hunter2" not in said  # the password is not echoed back


def test_a_repository_or_a_preprod_url_needs_its_tenant_and_a_preprod_url_is_a_web_address():
    from synedre.db.directory import DirectoryError, parse_file

    for tenant, said in (({"repo": "/srv/git/garage"}, "clients[1]: garage-martin: repo without a deploy_target"),
                         ({"preprod_url": "https://p.example", "repo": "/r"},
                          "clients[1]: garage-martin: preprod_url and repo without a deploy_target"),
                         ({"deploy_target": "garage", "preprod_url": "preprod.garage.example"},
                          "clients[1].preprod_url: garage-martin: preprod_url is an http:// or https:// URL")):
        with pytest.raises(DirectoryError) as refused:
            parse_file(json.dumps(_with_tenant(**tenant)).encode())
        assert said in str(refused.value), str(refused.value)


def test_import_writes_the_repository_and_show_client_says_what_the_fleet_uses(db, tmp_path):
    import os
    env = {**os.environ, "SYNEDRE_WORKSPACE_REPO": str(tmp_path / "mono")}
    local = tmp_path / "garage"
    subprocess.run(["git", "init", "-q", str(local)], check=True, timeout=30)
    d = _with_tenant(deploy_target="garage", preprod_url="https://preprod.garage.example", repo=str(local))
    path = tmp_path / "dir.json"
    path.write_text(json.dumps(d))
    assert run_cli("directory", "import", str(path), env=env).returncode == 0
    with psycopg.connect(db) as conn:
        config = dict(conn.execute("SELECT c.codename, t.config FROM synedre.tenant_topology t"
                                   " JOIN synedre.clients c ON c.id = t.client_id").fetchall())
    dupont_repo = "git@git.atelier-moreau.example:clients/boulangerie-dupont.git"
    assert config == {"boulangerie-dupont": {"preprod_url": "https://preprod.boulangerie-dupont.example",
                                             "repo": dupont_repo,
                                             "deploy_hosts": ["preprod.boulangerie-dupont.example:443"],
                                             "deploy_env": ["DUPONT_PREPROD_TOKEN"],
                                             "infra_paths": ["infra/", "Dockerfile"]},
                      "garage-martin": {"preprod_url": "https://preprod.garage.example", "repo": str(local)}}
    shown = run_cli("directory", "show", "garage-martin", env={**env, "COLUMNS": "300"})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "client: garage-martin (Garage Martin)", "deploy target: garage",
        "pre-production: https://preprod.garage.example", f"repository: {local} (local path)", "base branch: preprod"]
    remote = run_cli("directory", "show", "boulangerie-dupont", env={**env, "COLUMNS": "300"}).stdout
    state = os.environ["SYNEDRE_STATE_DIR"]
    assert f"repository: {dupont_repo} (remote: this host's mirror {state}/mirrors/" in remote, remote
    # a re-import without the repository goes back to the fleet's default, and says so
    del d["clients"][1]["repo"]
    path.write_text(json.dumps(d))
    assert run_cli("directory", "import", str(path), env=env).returncode == 0
    shown = run_cli("directory", "show", "garage-martin", env={**env, "COLUMNS": "300"}).stdout
    assert f"repository: {tmp_path / 'mono'} (SYNEDRE_WORKSPACE_REPO, the fleet's default)" in shown, shown
    missing = run_cli("directory", "show", "nobody", env=env)
    assert missing.returncode == 1 and "no client 'nobody'" in missing.stderr
