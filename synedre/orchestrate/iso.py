"""Mock-up conformity (SPEC §9.5): the QA screenshot against the chantier's mock-up image.

The difference is perceptual, from the `pixelmatch` package (a port of mapbox's
pixelmatch: a pixel counts when its YIQ colour distance is over `PIXEL_THRESHOLD`, and
anti-aliased pixels are not counted). Over `threshold` of the compared area is an
`iso_mismatch`, fed to the iso iteration budget.

How two images of different sizes are brought to one (the mock-up is the reference):
1. both are flattened onto white (a transparent mock-up reads as a page does);
2. the screenshot is scaled to the mock-up's width, keeping its aspect ratio, since a
   designer's export is often at another width or pixel density than the browser's;
3. if the result is larger than `MAX_COMPARE_PIXELS`, both are scaled down by the same
   factor: pixelmatch is pure Python: 15-40 s per megapixel that differs, on one core;
4. the overlapping top part is compared; the rows only the longer image has count as
   mismatched, so a page missing (or adding) a whole section is not a match.

Only the bounding box of the pixels that differ at all (plus a margin covering
pixelmatch's anti-aliasing neighbourhood) goes through pixelmatch: identical pixels never
count, so the result is the same and an almost-identical page costs almost nothing.

The diff image has the compared size: unchanged pixels as a faded grey copy of the
screenshot, mismatched ones in red (`DIFF_COLOR`), the unmatched rows red too.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageChops, UnidentifiedImageError
from pixelmatch.contrib.PIL import pixelmatch

ISO_MISMATCH = "iso_mismatch"
# Share of the compared area allowed to differ; the caller's setting normally overrides it.
DEFAULT_THRESHOLD = 0.05
PIXEL_THRESHOLD = 0.1  # pixelmatch's own default colour tolerance per pixel
MAX_COMPARE_PIXELS = 250_000
DIFF_COLOR = (255, 0, 0)
DIFF_ALPHA = 0.1  # the unchanged pixels' opacity in the diff image, as pixelmatch draws them
# antialiased() looks at a pixel's neighbours and at their neighbours: 2 px, plus one.
_AA_MARGIN = 3


class IsoError(Exception):
    """The mock-up (or screenshot) cannot be read as an image."""


@dataclass(frozen=True)
class IsoResult:
    mockup: Path
    mismatch_ratio: float
    mismatched_pixels: int
    compared_pixels: int
    compared_size: tuple[int, int]
    threshold: float
    diff_image: Path
    # where it differs, in the compared image's pixels: the box around the pixels counted
    # (x0, y0, x1, y1), None when none is; and the two heights once aligned, so a page
    # longer or shorter than its mock-up can be said in words (`describe`)
    region: tuple[int, int, int, int] | None = None
    heights: tuple[int, int] = (0, 0)  # (the screenshot's, the mock-up's)

    @property
    def ok(self) -> bool:
        return self.mismatch_ratio <= self.threshold


def load_image(path: Path) -> Image.Image:
    """The image flattened onto white, as RGB; `IsoError` if it is missing or not an image."""
    try:
        with Image.open(path) as im:
            im.load()
            rgba = im.convert("RGBA")
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as e:
        raise IsoError(f"cannot read image {path}: {e}") from e
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def _align(shot: Image.Image, mockup: Image.Image) -> tuple[Image.Image, Image.Image]:
    width = mockup.width
    if shot.width != width:
        shot = shot.resize((width, max(1, round(shot.height * width / shot.width))), Image.Resampling.LANCZOS)
    area = width * max(shot.height, mockup.height)
    if area > MAX_COMPARE_PIXELS:
        f = math.sqrt(MAX_COMPARE_PIXELS / area)
        shot, mockup = (im.resize((max(1, round(im.width * f)), max(1, round(im.height * f))),
                                  Image.Resampling.BOX) for im in (shot, mockup))
    return shot, mockup


def _faded(im: Image.Image) -> Image.Image:
    grey = im.convert("L").point(lambda y: round(255 + (y - 255) * DIFF_ALPHA))
    return Image.merge("RGBA", (grey, grey, grey, Image.new("L", im.size, 255)))


def _write_private_png(im: Image.Image, path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        im.save(f, format="PNG")
    os.chmod(path, 0o600)


def compare(screenshot: Path, mockup: Path, diff_path: Path, threshold: float = DEFAULT_THRESHOLD) -> IsoResult:
    """Compare `screenshot` with `mockup`, write the diff image to `diff_path` (0600)."""
    shot, ref = _align(load_image(screenshot), load_image(mockup))
    width = ref.width
    overlap = min(shot.height, ref.height)
    total_h = max(shot.height, ref.height)
    a, b = shot.crop((0, 0, width, overlap)), ref.crop((0, 0, width, overlap))

    diff = Image.new("RGBA", (width, total_h))
    diff.paste(_faded(a), (0, 0))
    if overlap < total_h:
        diff.paste(Image.new("RGBA", (width, total_h - overlap), (*DIFF_COLOR, 255)), (0, overlap))

    mismatched = (total_h - overlap) * width
    box = ImageChops.difference(a, b).getbbox()
    if box is not None:
        x0, y0 = max(0, box[0] - _AA_MARGIN), max(0, box[1] - _AA_MARGIN)
        x1, y1 = min(width, box[2] + _AA_MARGIN), min(overlap, box[3] + _AA_MARGIN)
        out = Image.new("RGBA", (x1 - x0, y1 - y0))
        mismatched += pixelmatch(a.crop((x0, y0, x1, y1)), b.crop((x0, y0, x1, y1)), out,
                                 threshold=PIXEL_THRESHOLD, alpha=DIFF_ALPHA, diff_color=DIFF_COLOR)
        diff.paste(out, (x0, y0))
    _write_private_png(diff, diff_path)
    compared = width * total_h
    red = Image.new("RGBA", diff.size, (*DIFF_COLOR, 255))
    region = ImageChops.difference(diff, red).convert("L").point(lambda v: 255 if v == 0 else 0).getbbox()
    return IsoResult(mockup=mockup, mismatch_ratio=mismatched / compared, mismatched_pixels=mismatched,
                     compared_pixels=compared, compared_size=(width, total_h), threshold=threshold,
                     diff_image=diff_path, region=region, heights=(shot.height, ref.height))


def _band(y0: int, y1: int, height: int) -> str:
    """Which part of the page a vertical span is in, in words."""
    names = ("top", "upper middle", "lower middle", "bottom")
    first, last = (min(3, 4 * y // max(1, height)) for y in (y0, max(y0, y1 - 1)))
    return names[first] if first == last else f"{names[first]} to {names[last]}"


def describe(figures: dict[str, object]) -> str:
    """The difference in words, from the figures QA stored (`detail.iso`): where the
    differing pixels lie and whether the page is longer or shorter than its mock-up."""
    size = figures.get("compared_size")
    region, heights = figures.get("region"), figures.get("heights")
    if not (isinstance(size, list) and len(size) == 2):
        return "where it differs was not recorded"
    width, height = int(size[0]), int(size[1])
    out = []
    if isinstance(region, list) and len(region) == 4:
        x0, y0, x1, y1 = (int(v) for v in region)
        out.append(f"the differing pixels lie in x {x0}-{x1}, y {y0}-{y1} of the {width}x{height} comparison"
                   f" (the {_band(y0, y1, height)} of the page, {(x1 - x0) * 100 // max(1, width)}% of its width)")
    if isinstance(heights, list) and len(heights) == 2 and heights[0] != heights[1]:
        shot, ref = int(heights[0]), int(heights[1])
        out.append(f"your page is {abs(shot - ref)} px {'longer' if shot > ref else 'shorter'} than the mock-up"
                   " at that scale (the rows only one of them has all count as different)")
    return "; ".join(out) or "no pixel differs"
