"""The iteration prompt's mock-up diff (issue 28): the sandboxed agent reads nothing of the
fleet's state directory (which may be on another host), so the brief hands the diff image
over as a file for its clone, named by its path there, and says the difference in words;
with no image to hand over, the words are all it says."""
from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from PIL import Image, ImageDraw
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from synedre.config import Settings
from synedre.db import proofs
from synedre.orchestrate import iso, iterations, qa
from synedre.spawn import workspace
from synedre.stages import qa as qa_stage
from synedre.stages.poll import ingest_one
from tests.conftest import CORPUS

pytestmark = pytest.mark.timeout(60)


def iso_failure(tmp_path: Path) -> qa.RouteResult:
    """A real comparison: the page's band at y 100-200 unlike its mock-up, the page 200 px longer."""
    shot, mock = tmp_path / "shot.png", tmp_path / "mock.png"
    page = Image.new("RGB", (400, 500), "white")
    ImageDraw.Draw(page).rectangle((50, 100, 250, 200), fill="#c00")
    page.save(shot)
    Image.new("RGB", (400, 300), "white").save(mock)
    state = tmp_path / "state" / "messages" / "1" / "qa"
    state.mkdir(parents=True)
    result = iso.compare(shot, mock, state / "check-1.diff.png", threshold=0.05)
    return qa.RouteResult("/contact", 200, True, screenshot=shot, iso=result)


def failed_launch(conn, tmp_path: Path, result: qa.RouteResult, *, with_proof: bool) -> tuple[int, int]:
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    mid = ingest_one(raw, "atlas", 1, 1, Settings(state_dir=tmp_path / "state"), lambda _: None)
    launch = conn.execute("INSERT INTO synedre.launches (message_id, attempt, iteration, status, contract)"
                          " VALUES (%s, 1, 1, 'succeeded', %s) RETURNING id",
                          (mid, Jsonb({"commits": ["abc1234"]}))).fetchone()["id"]
    run = conn.execute("INSERT INTO synedre.qa_runs (message_id, launch_id, iteration, target, base_url, deploy_ok)"
                       " VALUES (%s, %s, 1, 'acme', 'http://127.0.0.2:1', true) RETURNING id",
                       (mid, launch)).fetchone()["id"]
    assert result.iso is not None
    diff = result.iso.diff_image
    key = proofs.store(conn, diff.read_bytes(), "diff") if with_proof else None
    check = conn.execute(
        "INSERT INTO synedre.qa_checks (qa_run_id, declared, routes, resolved, resolution, status, reasons, detail,"
        " http_status, diff_image, diff_proof) VALUES (%s, '/contact', '{/contact}', '/contact', 'exact', 'failed',"
        " %s, %s, 200, %s, %s) RETURNING id",
        (run, Jsonb(list(result.reasons)), Jsonb(qa_stage._detail(result)), str(diff), key)).fetchone()["id"]
    return mid, check


@pytest.fixture
def conn(db):
    with psycopg.connect(db, row_factory=dict_row, autocommit=True) as c:
        yield c


def test_the_diff_image_goes_into_the_clone_and_the_prompt_names_it_there(conn, tmp_path):
    result = iso_failure(tmp_path)
    mid, check = failed_launch(conn, tmp_path, result, with_proof=True)
    result.iso.diff_image.unlink()  # QA ran on another host: the proof is in the database only

    brief = iterations.brief(conn, mid)

    name = f"{workspace.FLEET_DIR}/check-{check}.diff.png"
    assert [n for n, _ in brief.files] == [name]
    assert brief.files[0][1][:8] == b"\x89PNG\r\n\x1a\n"
    assert f"the diff image is {name} in your workspace (never commit it)" in brief.text
    assert str(tmp_path) not in brief.text and "/qa/" not in brief.text  # no path of the fleet's
    # and in words: from the red band down (the rows the mock-up lacks count whole), the page longer
    assert ("the differing pixels lie in x 0-400, y 100-500 of the 400x500 comparison (the top to bottom of"
            " the page, 100% of its width)") in brief.text, brief.text
    assert "your page is 200 px longer than the mock-up" in brief.text


def test_with_no_image_to_hand_over_the_brief_says_the_difference_in_words(conn, tmp_path):
    result = iso_failure(tmp_path)
    mid, _ = failed_launch(conn, tmp_path, result, with_proof=False)
    result.iso.diff_image.unlink()  # stored before proofs, and gone from this host

    brief = iterations.brief(conn, mid)

    assert brief.files == ()
    assert "the diff image could not be provided" in brief.text and ".diff.png" not in brief.text
    assert "of pixels differ (threshold 5.0%)" in brief.text
    assert "the differing pixels lie in x 0-400, y 100-500" in brief.text and "200 px longer" in brief.text


@pytest.mark.unit
def test_the_words_say_where_on_the_page():
    assert iso.describe({"compared_size": [100, 400], "region": [0, 0, 100, 90], "heights": [400, 400]}) == (
        "the differing pixels lie in x 0-100, y 0-90 of the 100x400 comparison (the top of the page, 100% of"
        " its width)")
    assert "the upper middle to bottom" in iso.describe({"compared_size": [100, 400], "region": [10, 120, 60, 400]})
    assert iso.describe({"compared_size": [10, 10], "region": None, "heights": [10, 10]}) == "no pixel differs"
    assert iso.describe({}) == "where it differs was not recorded"  # a row stored before the figures
