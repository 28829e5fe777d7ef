"""The directory in the operator's words (issue 19, item 7): a refused file says where and
why in one line, a misspelt key is refused, and two routes never share a mock-up file."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from tests.services import stack

pytestmark = pytest.mark.timeout(120)
EXAMPLE = stack.ROOT / "directory.example.json"


def synedre(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synedre.cli", *argv], capture_output=True, text=True,
                          env=dict(os.environ), cwd=stack.ROOT, timeout=60)


def test_a_refused_file_says_where_and_why_in_one_line_and_writes_nothing(db, tmp_path):
    bad = json.loads(EXAMPLE.read_text())
    bad["clients"][1]["mrr"] = -5
    bad["clients"][0]["persons"][0]["emial"] = bad["clients"][0]["persons"][0].pop("email")
    bad["chantiers"][0]["status"] = "ongoing"
    path = tmp_path / "directory.json"
    path.write_text(json.dumps(bad))
    out = synedre("directory", "import", str(path))
    assert out.returncode == 1 and out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    for said in ("clients[0].persons[0].email: field required", "clients[0].persons[0].emial: extra inputs are"
                 " not permitted", "clients[1].mrr: input should be greater than or equal to 0 (got -5)",
                 "chantiers[0].status: input should be 'open', 'paused' or 'closed' (got 'ongoing')"):
        assert said in out.stderr, out.stderr
    assert "pydantic" not in out.stderr and "http" not in out.stderr
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM synedre.clients").fetchone()[0] == 0
    missing = synedre("directory", "import", str(tmp_path / "nowhere.json"))
    assert missing.returncode == 2 and missing.stderr.startswith("error: cannot read ")


def test_two_routes_never_share_a_mockup_file(db, tmp_path):
    from PIL import Image

    assert synedre("directory", "import", str(EXAMPLE)).returncode == 0
    files = {}
    for route, colour in (("/a/b", "red"), ("/a-b", "blue")):
        image = tmp_path / f"{colour}.png"
        Image.new("RGB", (4, 4), colour).save(image)
        out = synedre("directory", "mockup", "dupont-site-vitrine", route, str(image))
        assert out.returncode == 0, out.stderr
        files[route] = out.stdout.rsplit(": ", 1)[1].strip()
    assert files["/a/b"] != files["/a-b"]
    with psycopg.connect(db) as conn:
        stored = dict(conn.execute("SELECT route, path FROM synedre.mockups").fetchall())
    assert stored == files
    assert Image.open(files["/a/b"]).getpixel((0, 0)) == (255, 0, 0)  # not overwritten by /a-b's
