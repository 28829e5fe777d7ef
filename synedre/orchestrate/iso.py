"""Mock-up conformity (SPEC §9.5): the QA screenshot against the chantier's mock-up image.

The difference is perceptual, mapbox's pixelmatch algorithm: a pixel counts when its YIQ
colour distance is over `PIXEL_THRESHOLD`, and anti-aliased pixels are not counted. It is
ported here to numpy (`pixelmatch`), whole arrays at a time, from the pure-Python
`pixelmatch` package 0.4.0 it was first run through: the same floating-point operations in
the same order, so the same count and the same diff image (tests/orchestrate/test_iso_fast.py
holds it to that package, bench/iso_compare.py measures both). Over `threshold` of the
compared area is an `iso_mismatch`, fed to the iso iteration budget.

How two images of different sizes are brought to one (the mock-up is the reference):
1. both are flattened onto white (a transparent mock-up reads as a page does);
2. the screenshot is scaled to the mock-up's width, keeping its aspect ratio, since a
   designer's export is often at another width or pixel density than the browser's;
3. if the result is larger than `MAX_COMPARE_PIXELS`, both are scaled down by the same
   factor (set when the comparison was pure Python, 15-40 s per megapixel that differs; it
   stays so that a check's figures read as earlier ones did);
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

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageChops, UnidentifiedImageError

ISO_MISMATCH = "iso_mismatch"
# Share of the compared area allowed to differ; the caller's setting normally overrides it.
DEFAULT_THRESHOLD = 0.05
PIXEL_THRESHOLD = 0.1  # pixelmatch's own default colour tolerance per pixel
MAX_COMPARE_PIXELS = 250_000
DIFF_COLOR = (255, 0, 0)
DIFF_ALPHA = 0.1  # the unchanged pixels' opacity in the diff image, as pixelmatch draws them
AA_COLOR = (255, 255, 0)  # pixelmatch's colour for an anti-aliased pixel (differs, not counted)
# antialiased() looks at a pixel's neighbours and at their neighbours: 2 px, plus one.
_AA_MARGIN = 3


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


class IsoError(Exception):
    """The mock-up (or screenshot) cannot be read as an image."""


def load_image(path: Path) -> Image.Image:
    """The image flattened onto white, as RGB; `IsoError` if it is missing or not an image."""
    try:
        with Image.open(path) as im:
            im.load()
            rgba = im.convert("RGBA")
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as e:
        raise IsoError(f"cannot read image {path}: {e}") from e
    if rgba.getchannel("A").getextrema()[0] == 255:  # opaque: onto white it would stay the very same (a screenshot)
        return rgba.convert("RGB")
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


# ---- pixelmatch, ported ----------------------------------------------------------------
# The YIQ coefficients of pixelmatch's `rgb2y`, `rgb2i`, `rgb2q`, and its colour_delta weights.
_RGB2Y = (0.29889531, 0.58662247, 0.11448223)
_RGB2I = (0.59597799, 0.27417610, 0.32180189)
_RGB2Q = (0.21147017, 0.52261711, 0.31114694)
_MAX_YIQ_DELTA = 35215  # the largest possible YIQ distance
# The 8 neighbours in the order pixelmatch visits them (x outer, y inner): of equal darkest
# (or brightest) neighbours, the first visited is the one whose siblings are looked at.
_NEIGHBOURS = tuple((dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy)

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Counts = npt.NDArray[np.uint8]
Indices = npt.NDArray[np.intp]


class _Padded:
    """An image's per-pixel values with a one-pixel frame of `fill` around them, so that a
    neighbour is a slice (off the image it reads `fill`); flat, a neighbour is an offset."""

    def __init__(self, values: npt.NDArray[np.generic], fill: object) -> None:
        self.h, self.w = values.shape
        self.grid = np.pad(values, 1, constant_values=fill)  # type: ignore[call-overload]
        self.flat = self.grid.ravel()
        self.centre = self.around(0, 0)

    def around(self, dx: int, dy: int) -> npt.NDArray[np.generic]:
        return self.grid[1 + dy:1 + dy + self.h, 1 + dx:1 + dx + self.w]

    def offset(self, dx: int, dy: int) -> int:
        return dy * (self.w + 2) + dx

    def index(self, where: Bools) -> Indices:
        """The flat index, in the frame, of each pixel `where` is true."""
        y, x = np.nonzero(where)
        return (y + 1) * (self.w + 2) + x + 1


def _yiq(rgba: npt.NDArray[np.uint8]) -> tuple[Floats, Floats, Floats]:
    """Each pixel's Y, I and Q once blended onto white as pixelmatch's `color_delta` does
    (`255 + (c - 255) * a / 255`, only where a < 255), the same operations in the same order."""
    f = rgba.astype(np.float64)
    r, g, b = f[..., 0], f[..., 1], f[..., 2]
    if (rgba[..., 3] < 255).any():
        a = f[..., 3] / 255
        r, g, b = (np.where(rgba[..., 3] < 255, 255 + (c - 255) * a, c) for c in (r, g, b))
    return (r * _RGB2Y[0] + g * _RGB2Y[1] + b * _RGB2Y[2], r * _RGB2I[0] - g * _RGB2I[1] - b * _RGB2I[2],
            r * _RGB2Q[0] - g * _RGB2Q[1] + b * _RGB2Q[2])


def _on_border(h: int, w: int) -> Counts:
    """1 on the image's edge: pixelmatch counts the missing neighbours there as one equal sibling."""
    border = np.ones((h, w), dtype=np.uint8)
    border[1:-1, 1:-1] = 0
    return border


def _equal_neighbours(values: _Padded, border: Counts) -> Counts:
    """How many neighbours have the pixel's very value, the edge counting as one (the frame's
    fill is equal to none)."""
    equal = border.copy()
    for dx, dy in _NEIGHBOURS:
        equal += values.centre == values.around(dx, dy)
    return equal


def _antialiased(y: _Padded, candidates: Indices, siblings: _Padded) -> Bools:
    """pixelmatch's `antialiased(img, x, y, …, img2)` at the `candidates` (pixels with at most
    2 neighbours of equal brightness, the edge counting as one), `y` being img's brightness
    framed by NaN (no neighbour there) and `siblings` whether a pixel has 3 or more neighbours
    of its very RGBA in both images: a darker and a brighter neighbour, and the darkest or the
    brightest (the first visited of equals) with many siblings in both."""
    centre = y.flat[candidates]
    darkest, brightest = np.zeros_like(centre), np.zeros_like(centre)
    at_darkest, at_brightest = np.zeros_like(candidates), np.zeros_like(candidates)
    for dx, dy in _NEIGHBOURS:
        at = candidates + y.offset(dx, dy)
        delta = centre - y.flat[at]  # NaN off the image: neither darker nor brighter
        darker, brighter = delta < darkest, delta > brightest
        np.copyto(darkest, delta, where=darker)
        np.copyto(at_darkest, at, where=darker)
        np.copyto(brightest, delta, where=brighter)
        np.copyto(at_brightest, at, where=brighter)
    return ((darkest < 0) & (brightest > 0)
            & (siblings.flat[at_darkest] | siblings.flat[at_brightest]))


def _grey(im: Image.Image, alpha: float) -> Image.Image:
    """What pixelmatch's PIL front end draws for two identical images (its `_draw_grayscale`)."""
    weight = im.getchannel("A").point(lambda a: int(a * alpha))
    white = Image.new("L", im.size, 255)
    grey = Image.composite(im.convert("L"), white, weight)
    return Image.merge("RGBA", (grey, grey, grey, white))


def pixelmatch(img1: Image.Image, img2: Image.Image, threshold: float = PIXEL_THRESHOLD, alpha: float = DIFF_ALPHA,
               diff_color: tuple[int, int, int] = DIFF_COLOR,
               aa_color: tuple[int, int, int] = AA_COLOR) -> tuple[int, Image.Image]:
    """The number of mismatched pixels and the diff image (RGBA), exactly as the `pixelmatch`
    package's `pixelmatch.contrib.PIL.pixelmatch(img1, img2, output, threshold, alpha=alpha,
    diff_color=diff_color, aa_color=aa_color)` counts and draws them, anti-aliasing detection
    on: over `threshold` in YIQ distance and not anti-aliased in either image is counted and
    drawn `diff_color`, anti-aliased is drawn `aa_color`, the rest is img1 in faded grey."""
    a, b = img1.convert("RGBA"), img2.convert("RGBA")
    if a.size != b.size:
        raise ValueError(f"image sizes do not match: {a.size} and {b.size}")
    if a.tobytes() == b.tobytes():
        return 0, _grey(a, alpha)
    p1, p2 = np.asarray(a, dtype=np.uint8), np.asarray(b, dtype=np.uint8)
    h, w = p1.shape[:2]
    (y1, i1, q1), (y2, i2, q2) = _yiq(p1), _yiq(p2)
    dy, di, dq = y1 - y2, i1 - i2, q1 - q2
    over = 0.5053 * dy * dy + 0.299 * di * di + 0.1957 * dq * dq > _MAX_YIQ_DELTA * threshold * threshold

    raw = p1.astype(np.float64)
    lum = raw[..., 0] * _RGB2Y[0] + raw[..., 1] * _RGB2Y[1] + raw[..., 2] * _RGB2Y[2]
    out = np.empty((h, w, 4), dtype=np.uint8)
    out[..., :3] = np.trunc(255 + (lum - 255) * (alpha * raw[..., 3] / 255)).astype(np.uint8)[..., None]
    out[..., 3] = 255
    counted = over
    if over.any():
        border = _on_border(h, w)
        # pixelmatch's has_many_siblings, in both images; -1 is no RGBA packed in 32 bits
        many = [_equal_neighbours(_Padded(np.ascontiguousarray(p).view(np.uint32)[..., 0].astype(np.int64), -1),
                                  border) > 2 for p in (p1, p2)]
        siblings = _Padded(many[0] & many[1], False)
        aa = np.zeros((h, w), dtype=np.bool_)
        for y in (_Padded(y1, np.nan), _Padded(y2, np.nan)):
            # more than 2 neighbours of equal brightness is never anti-aliasing
            candidates = over & ~aa & (_equal_neighbours(y, border) <= 2)
            aa[candidates] = _antialiased(y, y.index(candidates), siblings)
        counted = over & ~aa
        out[aa] = (*(int(c) for c in aa_color), 255)
        out[counted] = (*(int(c) for c in diff_color), 255)
    return int(counted.sum()), Image.fromarray(out, "RGBA")


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
        count, out = pixelmatch(a.crop((x0, y0, x1, y1)), b.crop((x0, y0, x1, y1)))
        mismatched += count
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
