"""OCR with the real Tesseract on images rendered here, and the input guards."""

from __future__ import annotations

import io
import logging
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from synedre.ocr.tesseract import OcrError, ocr_image

pytestmark = pytest.mark.timeout(60)
# Runs the tesseract binary (apt: tesseract-ocr); the input guards below need no binary.
tesseract = pytest.mark.integration

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")  # apt: fonts-dejavu-core


def _font(size: int = 48) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(DEJAVU), size) if DEJAVU.exists() else ImageFont.load_default(size)


def _render(lines: list[str], mode: str = "RGB", background="white", ink="black") -> Image.Image:
    img = Image.new(mode, (1400, 100 + 100 * len(lines)), background)
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((40, 40 + 100 * i), line, font=_font(), fill=ink)
    return img


def _encode(img: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares a size but carries no pixel data."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


SCREENSHOT_LINES = ["Facture impayée numéro 4217", "Please deploy the staging server"]


@tesseract
@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_rendered_text_is_read_back(fmt: str) -> None:
    text = ocr_image(_encode(_render(SCREENSHOT_LINES), fmt))
    words = text.lower().split()
    for word in ("facture", "impayée", "4217", "deploy", "staging", "server"):
        assert word in words
    assert text == text.strip()


@tesseract
def test_dark_text_on_transparent_background_is_read() -> None:
    img = _render(["Transparent screenshot"], mode="RGBA", background=(0, 0, 0, 0), ink=(0, 0, 0, 255))
    assert "transparent" in ocr_image(_encode(img)).lower()


@tesseract
def test_palette_image_is_read() -> None:
    img = _render(["Palette image"]).convert("P")
    assert "palette" in ocr_image(_encode(img, "GIF")).lower()


@tesseract
def test_blank_image_gives_empty_text() -> None:
    assert ocr_image(_encode(Image.new("L", (400, 200), "white"))) == ""


@pytest.mark.parametrize("data", [b"", b"not an image at all" * 50, b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"])
def test_undecodable_bytes_raise_ocr_error(data: bytes) -> None:
    with pytest.raises(OcrError, match="not an image"):
        ocr_image(data)


def test_truncated_image_raises_ocr_error() -> None:
    png = _encode(_render(["truncated"]))
    with pytest.raises(OcrError, match="could not be decoded"):
        ocr_image(png[: len(png) // 2])


def test_header_without_pixels_raises_ocr_error() -> None:
    with pytest.raises(OcrError, match="could not be decoded"):
        ocr_image(_png_header_only(100, 100))


def test_image_over_max_pixels_is_rejected_before_decoding() -> None:
    # 7000 x 7000 = 49 M pixels: above our 40 M default, below Pillow's own bomb limit.
    with pytest.raises(OcrError, match="too large"):
        ocr_image(_png_header_only(7000, 7000))


def test_decompression_bomb_is_rejected() -> None:
    with pytest.raises(OcrError, match="decompression bomb"):
        ocr_image(_png_header_only(100_000, 100_000))


def test_max_pixels_is_configurable() -> None:
    with pytest.raises(OcrError, match="too large"):
        ocr_image(_encode(_render(["small"])), max_pixels=10_000)


@tesseract
def test_tesseract_timeout_raises_ocr_error() -> None:
    # Loading the fra+eng models alone takes far longer than 1 ms.
    with pytest.raises(OcrError, match="timed out"):
        ocr_image(_encode(_render(SCREENSHOT_LINES)), timeout=0.001)


def test_non_positive_timeout_is_refused_not_unlimited() -> None:
    with pytest.raises(ValueError):
        ocr_image(_encode(_render(["x"])), timeout=0)


@tesseract
def test_ocr_text_is_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    text = ocr_image(_encode(_render(["Confidential password hunter2"])))
    assert "hunter2" in text
    assert "hunter2" not in caplog.text
