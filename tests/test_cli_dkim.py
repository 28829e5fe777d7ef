"""`synedre inspect` and `synedre status` tell a DKIM pass, an unsigned mail and a signature
that does not hold apart (issue 27): an unsigned mail is not a failure."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from synedre.config import Settings
from synedre.stages.poll import ingest_one
from tests.services import stack

pytestmark = pytest.mark.timeout(120)
CASES = stack.CORPUS / "cases"


def synedre(*argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # piped: one whole line per row
    return subprocess.run([sys.executable, "-m", "synedre.cli", *argv], capture_output=True, text=True,
                          cwd=stack.ROOT, timeout=60, env=env)


@pytest.fixture
def three(db, tmp_path):
    """The corpus's signed forward as it came (pass), its body altered after signing (fail),
    and an unsigned mail."""
    signed = (CASES / "P01-founder-forward-run.eml").read_bytes()
    altered = signed.replace(b"Message-ID: <", b"Message-ID: <altered.", 1).replace(b"rapidement", b"RAPIDEMENT")
    unsigned = (CASES / "P11-self-forward-atlas-recap-no-dkim.eml").read_bytes()
    s = Settings(state_dir=tmp_path / "state", dkim_keys_file=stack.CORPUS / "dkim-keys.json")
    return [ingest_one(raw, "atlas", 1, uid, s, lambda _: None)
            for uid, raw in enumerate((signed, altered, unsigned), 1)]


def test_inspect_and_status_show_pass_fail_and_unsigned_apart(three):
    passed, failed, unsigned = three
    rows = {r["id"]: r for r in json.loads(synedre("inspect", "--all", "--json").stdout)}
    assert [rows[m]["dkim"] for m in three] == ["pass", "fail", "unsigned"]

    listing = synedre("inspect", "--all").stdout.splitlines()
    dkim_column = [line.split()[-1] for line in listing if line.split() and line.split()[0].isdigit()]
    assert dkim_column == ["pass", "fail", "unsigned"], listing

    assert "  dkim pass" in synedre("inspect", str(passed)).stdout
    assert "  dkim fail (invalid: " in synedre("inspect", str(failed)).stdout  # with the reason
    assert "  dkim unsigned" in synedre("inspect", str(unsigned)).stdout

    status = synedre("status")  # other checks may fail here (no clamd): the counts are printed whatever
    assert "dkim: pass 1, fail 1, unsigned 1" in status.stdout.splitlines(), status.stdout
