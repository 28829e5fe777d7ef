"""Which stage executions the runner works and writes in the claim's own transaction
(`StageCode.instant`): only those with nothing slow to do for what they loaded."""
import pytest

from synedre.config import Settings
from synedre.message import ParsedMessage
from synedre.stages.materialize import Materialize
from synedre.stages.ocr import Ocr
from synedre.stages.scan import Scan

pytestmark = pytest.mark.unit
PNG = {"idx": 0, "content_type": "image/png", "verdict": "clean", "filename": "a.png"}
CSV = {"idx": 1, "content_type": "text/csv", "verdict": "clean", "filename": "b.csv"}


def message(*attachments):
    return ParsedMessage(1, "<m@x>", "atlas", "a@b.c", "s", False, b"", None, tuple(attachments))


def test_scan_is_instant_only_without_attachments(tmp_path):
    scan = Scan(Settings(state_dir=tmp_path))
    assert scan.instant(message())
    assert not scan.instant(message(CSV))  # clamd has a file to read


def test_ocr_is_instant_unless_a_clean_image_waits_for_tesseract(tmp_path):
    ocr = Ocr(Settings(state_dir=tmp_path))
    assert ocr.instant(message()) and ocr.instant(message(CSV))
    assert ocr.instant(message({**PNG, "verdict": "infected"}))  # never read
    assert not ocr.instant(message(PNG, CSV))


def test_materialize_is_always_instant():
    assert Materialize().instant(None)
