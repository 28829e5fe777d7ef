"""OCR of one image attachment with a local Tesseract, through pytesseract.

The returned text is sensitive (SPEC §5): callers keep it in memory and never log
or persist it; this module logs nothing.
"""

from __future__ import annotations

import io
import warnings

import pytesseract
from PIL import Image, UnidentifiedImageError

# The formats screenshots and scans arrive in; Pillow's rarer decoders are
# attack surface we do not need for email attachments.
ALLOWED_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP")


class OcrError(Exception):
    """The image could not be OCR'd: undecodable, too large, or Tesseract failed."""


def _open_image(data: bytes, max_pixels: int) -> Image.Image:
    try:
        with warnings.catch_warnings():
            # Our own max_pixels check below is the limit; Pillow's warning only adds noise.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except Image.DecompressionBombError as exc:
        raise OcrError(f"image rejected as a decompression bomb: {exc}") from exc
    except UnidentifiedImageError as exc:
        raise OcrError(f"not an image in an allowed format ({', '.join(ALLOWED_FORMATS)})") from exc
    except (OSError, ValueError, SyntaxError) as exc:  # a recognised but corrupt header
        raise OcrError(f"image header could not be decoded: {exc}") from exc

    width, height = img.size
    # Checked on the header, before any pixel is decoded.
    if width * height > max_pixels:
        raise OcrError(f"image too large: {width}x{height} = {width * height} pixels > {max_pixels}")
    if width == 0 or height == 0:
        raise OcrError(f"empty image: {width}x{height}")
    try:
        img.load()
        return _to_ocr_mode(img)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:  # truncated or corrupt pixel data
        raise OcrError(f"image data could not be decoded: {exc}") from exc


def _to_ocr_mode(img: Image.Image) -> Image.Image:
    if img.mode in ("1", "L", "RGB"):
        return img
    if img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info:
        # Transparent pixels usually hold black: flatten onto white, or dark text
        # drawn on a transparent screenshot background disappears.
        rgba = img.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB")
    return img.convert("RGB")


def ocr_image(
    data: bytes,
    languages: str = "fra+eng",
    timeout: float = 60.0,
    max_pixels: int = 40_000_000,
) -> str:
    """Return the text Tesseract reads in the image ``data`` (first frame only), stripped."""
    if timeout <= 0:
        raise ValueError("timeout must be positive: pytesseract treats 0 as 'no limit'")
    img = _open_image(data, max_pixels)
    # pytesseract re-encodes the image in its source format; a JPEG would be
    # recompressed at quality 75 before Tesseract sees it. No format means PNG.
    img.format = None
    try:
        text = pytesseract.image_to_string(img, lang=languages, timeout=timeout)
    except pytesseract.TesseractNotFoundError as exc:
        raise OcrError("tesseract binary not found (apt install tesseract-ocr)") from exc
    except pytesseract.TesseractError as exc:  # a RuntimeError subclass: catch it first
        raise OcrError(f"tesseract failed with status {exc.status}: {exc.message}") from exc
    except RuntimeError as exc:  # pytesseract's only signal for a killed-on-timeout run
        raise OcrError(f"tesseract timed out after {timeout:g}s") from exc
    return text.strip()
