"""No silent typo (issue 27): a SYNEDRE_* variable no setting reads, in the environment or in
`.env`, is named at start with the closest setting's name."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from synedre.config import unknown_variables
from tests.services import stack


@pytest.mark.unit
@pytest.mark.timeout(60)
def test_a_misspelt_variable_is_named_with_the_setting_it_is_closest_to_env_and_dotenv(tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text("SYNEDRE_LOG_LEVL=DEBUG\nSYNEDRE_LOG_FORMAT=json\nOTHER=1\n")
    environ = {"SYNEDRE_MISTRAL_SEVER_URL": "x", "SYNEDRE_CLAMD": "/x", "SYNEDRE_ZZZZZZ": "1",
               "SYNEDRE_TEST_REDIS_URL": "redis://", "PATH": "/bin"}
    assert unknown_variables(environ, dotenv) == [
        f"SYNEDRE_LOG_LEVL ({dotenv}) is not a setting: did you mean SYNEDRE_LOG_LEVEL?",
        "SYNEDRE_MISTRAL_SEVER_URL is not a setting: did you mean SYNEDRE_MISTRAL_SERVER_URL?",
        "SYNEDRE_ZZZZZZ is not a setting (the README's Configuration lists them)"]
    assert unknown_variables({"SYNEDRE_CLAMD": "/x"}, None) == []


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_status_warns_of_a_misspelt_server_url_before_anything_else(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNEDRE_")}
    env.update(SYNEDRE_MISTRAL_SEVER_URL="x", SYNEDRE_STATE_DIR=str(tmp_path / "state"),
               SYNEDRE_BROKER_URL=stack.TEST_REDIS_URL)
    out = subprocess.run([sys.executable, "-m", "synedre.cli", "status"], env=env, cwd=stack.ROOT,
                         capture_output=True, text=True, timeout=30)
    assert out.stderr.splitlines()[0] == \
        "warning: SYNEDRE_MISTRAL_SEVER_URL is not a setting: did you mean SYNEDRE_MISTRAL_SERVER_URL?"
