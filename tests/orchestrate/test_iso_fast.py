"""Mock-up conformity's pixelmatch, ported to numpy (synedre/orchestrate/iso.py), against the
pure-Python `pixelmatch` package it replaced: the same mismatched count and the very same
diff image, anti-aliasing detection and image borders included."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image, ImageChops, ImageDraw, ImageFont
from pixelmatch.contrib.PIL import pixelmatch as reference

from synedre.orchestrate import iso

pytestmark = pytest.mark.unit

SIZES = st.integers(2, 24)
COLOURS = st.tuples(*[st.integers(0, 255)] * 3)
RGBA = st.tuples(*[st.integers(0, 255)] * 4)


def landing_page(size: tuple[int, int] = (1280, 900), title: str = "Des sites qui vendent") -> Image.Image:
    """A page as a browser shows one: a header, anti-aliased text, a hero block, cards."""
    w, h = size
    im = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(im)
    d.rectangle((0, 0, w, 72), fill="#13294b")
    d.text((32, 22), "ACME", font=ImageFont.load_default(size=28), fill="white")
    for i, item in enumerate(("Services", "Tarifs", "Blog", "Contact")):
        d.text((w - 520 + i * 120, 28), item, font=ImageFont.load_default(size=18), fill="#dde")
    d.rectangle((0, 72, w, 420), fill="#f3f5fa")
    d.text((64, 140), title, font=ImageFont.load_default(size=52), fill="#13294b")
    body = ImageFont.load_default(size=17)
    for line in range(4):
        d.text((64, 230 + line * 28), "Un site rapide, clair et pensé pour vos clients. " * 2, font=body, fill="#445")
    d.rounded_rectangle((64, 350, 280, 398), radius=10, fill="#f60")
    d.text((92, 362), "Demander un devis", font=body, fill="white")
    for i in range(3):
        x = 64 + i * (w - 128) // 3
        d.rounded_rectangle((x, 470, x + (w - 128) // 3 - 32, 840), radius=14, outline="#ccd", width=2)
        d.ellipse((x + 24, 494, x + 88, 558), fill=("#2a7", "#27a", "#a27")[i])
        for line in range(6):
            d.text((x + 24, 590 + line * 26), f"Texte de la carte, ligne {line}", font=body, fill="#333")
    return im


def matched(a: Image.Image, b: Image.Image, threshold: float, alpha: float, diff_color=iso.DIFF_COLOR,
            aa_color=iso.AA_COLOR) -> int:
    out = Image.new("RGBA", a.size)
    expected = reference(a, b, out, threshold=threshold, alpha=alpha, diff_color=diff_color, aa_color=aa_color)
    count, diff = iso.pixelmatch(a, b, threshold=threshold, alpha=alpha, diff_color=diff_color, aa_color=aa_color)
    assert count == expected
    assert diff.mode == "RGBA" and diff.size == a.size
    assert diff.tobytes() == out.tobytes(), ImageChops.difference(diff, out).getbbox()
    return count


@st.composite
def noise(draw, w: int, h: int) -> Image.Image:
    """Random pixels, from a few colours (so that equal siblings happen) or from all of them."""
    palette = draw(st.lists(RGBA, min_size=1, max_size=4) | st.just([]))
    pixels = draw(st.lists(st.sampled_from(palette) if palette else RGBA, min_size=w * h, max_size=w * h))
    im = Image.new("RGBA", (w, h))
    im.putdata(pixels)
    return im


@st.composite
def rectangles(draw, w: int, h: int) -> Image.Image:
    im = Image.new("RGBA", (w, h), draw(RGBA | COLOURS.map(lambda c: (*c, 255))))
    d = ImageDraw.Draw(im)
    for _ in range(draw(st.integers(0, 5))):
        xs = sorted(draw(st.lists(st.integers(0, w - 1), min_size=2, max_size=2)))
        ys = sorted(draw(st.lists(st.integers(0, h - 1), min_size=2, max_size=2)))
        d.rectangle((xs[0], ys[0], xs[1], ys[1]), fill=draw(RGBA | COLOURS.map(lambda c: (*c, 255))))
    return im


@st.composite
def text(draw, w: int, h: int) -> Image.Image:
    """Anti-aliased glyphs, as a page's text is."""
    im = Image.new("RGBA", (w, h), draw(COLOURS.map(lambda c: (*c, 255))))
    ImageDraw.Draw(im).text((draw(st.integers(-4, w // 2)), draw(st.integers(-8, h // 2))),
                            draw(st.text("aeglmsW#@&", min_size=1, max_size=4)),
                            font=ImageFont.load_default(size=draw(st.integers(6, 20))),
                            fill=draw(COLOURS.map(lambda c: (*c, 255))))
    return im


def shifted(im: Image.Image, dx: int, dy: int) -> Image.Image:
    return ImageChops.offset(im, dx, dy)


@st.composite
def transparent(draw, im: Image.Image) -> Image.Image:
    """Part of the image made (semi-)transparent, its colours kept or changed under it."""
    w, h = im.size
    out = im.copy()
    x0, x1 = sorted(draw(st.lists(st.integers(0, w - 1), min_size=2, max_size=2)))
    y0, y1 = sorted(draw(st.lists(st.integers(0, h - 1), min_size=2, max_size=2)))
    box = Image.new("RGBA", (x1 - x0 + 1, y1 - y0 + 1), draw(RGBA.map(lambda c: (*c[:3], c[3] % 3 * 100))))
    if draw(st.booleans()):  # the same colours, seen through
        box = out.crop((x0, y0, x1 + 1, y1 + 1))
        box.putalpha(draw(st.sampled_from((0, 1, 100, 254))))
    out.paste(box, (x0, y0))
    return out


@st.composite
def pairs(draw) -> tuple[Image.Image, Image.Image]:
    w, h = draw(st.sampled_from(["any"] * 6 + ["row", "column"]).flatmap(  # 1 wide or 1 high
        lambda shape: st.tuples(st.just(1) if shape == "column" else SIZES,
                                st.just(1) if shape == "row" else SIZES)))
    kind = st.sampled_from((noise, rectangles, text, text))
    a = draw(draw(kind)(w, h))
    how = draw(st.sampled_from(("other", "shifted", "shifted", "touched", "transparent", "same")))
    if how == "other":
        b = draw(draw(kind)(w, h))
    elif how == "shifted":
        b = shifted(a, draw(st.integers(-2, 2)), draw(st.integers(-2, 2)))
    elif how == "touched":  # a few pixels changed
        b = a.copy()
        for _ in range(draw(st.integers(1, 4))):
            b.putpixel((draw(st.integers(0, w - 1)), draw(st.integers(0, h - 1))), draw(RGBA))
    elif how == "transparent":
        b = draw(transparent(a))
    else:
        b = a.copy()
    return (b, a) if draw(st.booleans()) else (a, b)


@pytest.mark.timeout(120)
@settings(deadline=None, max_examples=300)
@given(images=pairs(), threshold=st.sampled_from((0.0, 0.1, 1.0)) | st.floats(0, 1),
       alpha=st.sampled_from((0.0, 0.1, 1.0)) | st.floats(0, 1),
       colours=st.sampled_from([(iso.DIFF_COLOR, iso.AA_COLOR)]) | st.tuples(COLOURS, COLOURS))
def test_the_port_counts_and_draws_as_pixelmatch_does(images, threshold, alpha, colours):
    a, b = images
    matched(a, b, threshold, alpha, *colours)


def test_the_port_matches_pixelmatch_on_text_shifted_by_a_pixel():
    """Anti-aliasing shows up: the shifted glyphs' edges are drawn yellow, not counted."""
    a = text_image((120, 40), (8, 6))
    b = text_image((120, 40), (9, 6))
    matched(a, b, iso.PIXEL_THRESHOLD, iso.DIFF_ALPHA)
    _, diff = iso.pixelmatch(a, b)
    assert (*iso.AA_COLOR, 255) in {c for _, c in diff.getcolors(maxcolors=1 << 16)}


def text_image(size: tuple[int, int], at: tuple[int, int]) -> Image.Image:
    im = Image.new("RGB", size, "white")
    ImageDraw.Draw(im).text(at, "Bonjour", font=ImageFont.load_default(size=24), fill="#123")
    return im


def test_a_page_against_its_mockup_gives_what_pixelmatch_gives(tmp_path: Path):
    """A realistic pair brought to the compared size as iso.compare does (a 1280x900 page,
    a 1280x720 mock-up with another title): compared whole, the count and the diff image are
    pixelmatch's, and iso.compare, which ports only the box where pixels differ, counts the same."""
    page, mockup = landing_page(), landing_page((1280, 720), title="Des sites qui parlent")
    shot, ref = iso._align(page, mockup)
    overlap = min(shot.height, ref.height)
    a, b = shot.crop((0, 0, ref.width, overlap)), ref.crop((0, 0, ref.width, overlap))
    expected = matched(a, b, iso.PIXEL_THRESHOLD, iso.DIFF_ALPHA)
    assert 0 < expected < a.width * a.height // 20

    page.save(tmp_path / "page.png")
    mockup.save(tmp_path / "mockup.png")
    result = iso.compare(tmp_path / "page.png", tmp_path / "mockup.png", tmp_path / "d.png")
    assert result.compared_size == (596, 419) and result.heights == (419, 335)
    assert result.mismatched_pixels == expected + 596 * (419 - 335)


def test_an_image_is_flattened_onto_white_and_an_opaque_one_read_as_is(tmp_path: Path):
    """load_image skips the compositing for an opaque image: it would change no pixel."""
    im = text_image((60, 30), (2, 2)).convert("RGBA")
    im.save(tmp_path / "opaque.png")
    im.paste(Image.new("RGBA", (20, 30), (200, 10, 10, 0)), (0, 0))
    im.paste(Image.new("RGBA", (20, 30), (10, 10, 200, 128)), (20, 0))
    im.save(tmp_path / "transparent.png")

    white = Image.new("RGBA", im.size, (255, 255, 255, 255))
    assert iso.load_image(tmp_path / "transparent.png").tobytes() == \
        Image.alpha_composite(white, im).convert("RGB").tobytes()
    assert iso.load_image(tmp_path / "transparent.png").getpixel((5, 5)) == (255, 255, 255)
    assert iso.load_image(tmp_path / "opaque.png").tobytes() == text_image((60, 30), (2, 2)).tobytes()
