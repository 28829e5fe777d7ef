"""The mailbox registry is checked like the settings: each mistake one line naming the file,
the table, the key and what is accepted, exit 2; `password_env` and `[oauth2]` exclusive."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from synedre import mailboxes
from synedre.oauth.config import OAuth2
from tests.services import stack

pytestmark = pytest.mark.timeout(120)

GOOD = """[mailboxes.atlas]
imap_host = "127.0.0.1"
imap_port = 143
imap_tls = false
username = "atlas"
password_env = "TEST_ATLAS_PASSWORD"
"""
OAUTH = """[mailboxes.atlas]
imap_host = "127.0.0.1"
username = "atlas"
auth = "oauth2"
[mailboxes.atlas.oauth2]
provider = "custom"
client_id = "synedre"
token_url = "http://127.0.0.1:1/token"
scopes = ["mail"]
refresh_token_file = "/nonexistent/atlas.token"
"""
TYPOS = {
    "imap_tsl": (GOOD.replace("imap_tls", "imap_tsl"), "[mailboxes.atlas] unknown key imap_tsl (accepted: imap_host,"),
    "no username": (GOOD.replace('username = "atlas"\n', ""), "[mailboxes.atlas] missing key username"),
    "both auth kinds": (OAUTH.replace('auth = "oauth2"', 'auth = "oauth2"\npassword_env = "X"'),
                        "[mailboxes.atlas] password_env and [oauth2] are exclusive"),
    "oauth2 typo": (OAUTH.replace("client_id", "client_idd"),
                    "[mailboxes.atlas.oauth2] unknown key client_idd (accepted: provider, client_id,"),
    "no way in": (GOOD.replace('password_env = "TEST_ATLAS_PASSWORD"\n', ""),
                  "[mailboxes.atlas] missing key password_env"),
    "a port in words": (GOOD.replace("143", '"imap"'), "[mailboxes.atlas] imap_port = 'imap': "),
    "a table typo": ("[mailbox.atlas]\nimap_host = 'x'\n", "unknown key mailbox (accepted: one [mailboxes.<id>]"),
}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mailboxes.toml"
    path.write_text(text)
    return path


@pytest.mark.unit
@pytest.mark.parametrize("case", sorted(TYPOS))
def test_each_registry_mistake_is_one_line_naming_the_file_the_table_and_the_key(tmp_path, case):
    text, said = TYPOS[case]
    path = _write(tmp_path, text)
    with pytest.raises(mailboxes.RegistryError) as caught:
        mailboxes.load(path)
    line = str(caught.value)
    assert "\n" not in line and said in line and str(path) in line, line
    assert "pydantic" not in line and "http" not in line.split(":", 1)[1].replace("http://127.0.0.1:1", "")


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], env=env, cwd=stack.ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.unit
@pytest.mark.parametrize("case", ["imap_tsl", "no username", "both auth kinds"])
def test_fleet_and_poll_refuse_a_mistaken_registry_in_one_line_with_exit_2(tmp_path, case):
    text, said = TYPOS[case]
    env = {**os.environ, "SYNEDRE_MAILBOXES_FILE": str(_write(tmp_path, text)), "TEST_ATLAS_PASSWORD": "pw",
           "SYNEDRE_STATE_DIR": str(tmp_path / "state")}
    for args in (["fleet"], ["poll", "atlas", "--wait"]):
        out = _cli(args, env)
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (args, out.stderr)
        assert "Traceback" not in out.stderr and not (tmp_path / "state").exists()


@pytest.mark.unit
def test_the_shipped_example_and_each_of_its_commented_tables_load(tmp_path):
    path = stack.ROOT / "mailboxes.example.toml"
    assert list(mailboxes.load(path)) == ["atlas"]
    # the commented tables and keys, not the prose nor `# # …` (an alternative)
    uncommented = re.sub(r"^# (?=\[|[a-z_0-9]+ = )", "", path.read_text(), flags=re.M)
    boxes = mailboxes.load(_write(tmp_path, uncommented))
    assert set(boxes) == {"atlas", "atlas-google", "atlas-m365"}
    google, m365 = boxes["atlas-google"].oauth2, boxes["atlas-m365"].oauth2
    assert google is not None and google.endpoints().scopes == ("https://mail.google.com/",)
    assert google.endpoints().token_url == "https://oauth2.googleapis.com/token"
    assert google.endpoints().device_authorization_url is None  # Google's device flow has no mail scope
    assert m365 is not None and m365.endpoints().token_url == \
        "https://login.microsoftonline.com/atelier-moreau.fr/oauth2/v2.0/token"
    assert "offline_access" in m365.endpoints().scopes


@pytest.mark.unit
@pytest.mark.parametrize(("table", "said"), [
    ('provider = "microsoft"\nclient_id = "c"\napp_only = true\nclient_secret_env = "S"',
     "app_only needs tenant = your Entra tenant id"),
    ('provider = "google"\nclient_id = "c"\nrefresh_token_file = "/x"',
     "Google's token endpoint needs the client secret"),
    ('provider = "custom"\nclient_id = "c"\nrefresh_token_file = "/x"',
     'provider = "custom" needs token_url and scopes'),
    ('provider = "microsoft"\nclient_id = "c"', "name where the refresh token is"),
    ('provider = "google"\nclient_id = "c"\nclient_secret_env = "S"\nrefresh_token_file = "/x"\n'
     'token_url = "https://x"', 'token_url is for provider = "custom"'),
])
def test_oauth2_tables_that_cannot_work_are_refused_saying_why(tmp_path, table, said):
    path = _write(tmp_path, f'[mailboxes.atlas]\nimap_host = "h"\nusername = "u"\nauth = "oauth2"\n'
                            f'[mailboxes.atlas.oauth2]\n{table}\n')
    with pytest.raises(mailboxes.RegistryError, match=re.escape(said)):
        mailboxes.load(path)


@pytest.mark.unit
def test_app_only_microsoft_asks_for_the_default_scope_of_exchange_online():
    cfg = OAuth2(provider="microsoft", client_id="c", tenant="0000-tenant", app_only=True,
                       client_secret_env="S")
    assert cfg.endpoints().scopes == ("https://outlook.office365.com/.default",)
    assert cfg.references() == [("env", "S")]
