"""Mock-up conformity (synedre/orchestrate/iso.py): one `iso.compare` of a page against a
mock-up it does not resemble, the case the iso budget's checks pay most for.

The page is the one tests/orchestrate/test_iso_fast.py draws (1280x900: a header, a hero,
cards, anti-aliased text), the mock-up a solid 1280x720 colour: both are brought to 596x419
(`MAX_COMPARE_PIXELS`) and nearly every pixel of the overlap differs. The baseline is the
same `iso.compare` in the same run with its pixelmatch step done by the pure-Python
`pixelmatch` package (0.4.0) the numpy port replaced, alternated with the port over
`--rounds` rounds; CPU time of this process (`time.process_time`), medians, of the whole
compare (image loading, scaling and the PNG written included) and of the pixelmatch step
alone. The two must
agree: the same mismatched count and the same diff image, byte for byte. Target: a ratio of
at least 20. No service is started.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PIL import Image  # noqa: E402
from pixelmatch.contrib.PIL import pixelmatch as pure_python  # noqa: E402

from synedre.orchestrate import iso  # noqa: E402
from tests.orchestrate.test_iso_fast import landing_page  # noqa: E402

TARGET = 20


def reference(img1: Image.Image, img2: Image.Image, threshold: float = iso.PIXEL_THRESHOLD,
              alpha: float = iso.DIFF_ALPHA, diff_color: tuple[int, int, int] = iso.DIFF_COLOR,
              aa_color: tuple[int, int, int] = iso.AA_COLOR) -> tuple[int, Image.Image]:
    """The pixelmatch package behind the port's signature."""
    out = Image.new("RGBA", img1.size)
    count = pure_python(img1, img2, out, threshold=threshold, alpha=alpha, diff_color=diff_color, aa_color=aa_color)
    return count, out


def timed(step: Callable[..., tuple[int, Image.Image]], page: Path, mockup: Path,
          diff: Path) -> tuple[float, float, iso.IsoResult, bytes]:
    """The CPU time of the whole compare and of its pixelmatch step alone, the result, the diff's pixels."""
    port, step_s = iso.pixelmatch, []

    def measured(*args: object, **kwargs: object) -> tuple[int, Image.Image]:
        t0 = time.process_time()
        try:
            return step(*args, **kwargs)
        finally:
            step_s.append(time.process_time() - t0)

    iso.pixelmatch = measured
    try:
        t0 = time.process_time()
        result = iso.compare(page, mockup, diff)
        took = time.process_time() - t0
    finally:
        iso.pixelmatch = port
    with Image.open(diff) as im:
        return took, sum(step_s), result, im.tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-iso-") as tmp:
        root = Path(tmp)
        page, mockup = root / "page.png", root / "mockup.png"
        landing_page().save(page)
        Image.new("RGB", (1280, 720), "#2b4c7e").save(mockup)
        slow, fast, slow_step, fast_step, same_count, same_diff = [], [], [], [], True, True
        for _ in range(args.rounds):
            s, s_step, r_slow, d_slow = timed(reference, page, mockup, root / "slow.png")
            f, f_step, r_fast, d_fast = timed(iso.pixelmatch, page, mockup, root / "fast.png")
            slow.append(s)
            fast.append(f)
            slow_step.append(s_step)
            fast_step.append(f_step)
            same_count &= r_slow.mismatched_pixels == r_fast.mismatched_pixels
            same_diff &= d_slow == d_fast
        w, h = r_fast.compared_size
        ref_s, fast_s = statistics.median(slow), statistics.median(fast)
        ref_step, fast_step_s = statistics.median(slow_step), statistics.median(fast_step)
        print(f"iso_compare size={w}x{h} mismatched={r_fast.mismatched_pixels} rounds={args.rounds}"
              f" reference_s={ref_s:.2f} fast_s={fast_s:.3f} ratio={ref_s / fast_s:.0f} (target >= {TARGET})"
              f" pixelmatch_step reference_s={ref_step:.2f} fast_s={fast_step_s:.3f} ratio={ref_step / fast_step_s:.0f}"
              f" same_count={same_count} same_diff={same_diff} loadavg={os.getloadavg()[0]:.1f}", flush=True)
        if not (same_count and same_diff):
            sys.exit(1)


if __name__ == "__main__":
    main()
