"""QA of a pre-production deploy (SPEC §9.3–9.5): routes against the sitemap, HTTP status,
a real Chromium (console errors, page errors, failed requests, screenshot), mock-up conformity."""
from __future__ import annotations

import shutil
import socket
import stat
import time
from pathlib import Path

import psutil
import pytest
from PIL import Image, ImageDraw

from synedre.orchestrate import browser as qa_browser, iso, qa
from synedre.orchestrate.browser import Browser
from synedre.orchestrate.qa import ROUTE_NOT_IN_SITEMAP, SitemapError, check_route, resolve_routes
from synedre.redact import Redactor
from tests.services.site import page, serve_directory, start_site

# Chromium tests take 60 s at most: ~5 s of Playwright driver and browser start, then 1-3 s
# a page on an idle machine; the margin is for a loaded one.
unit = pytest.mark.unit

SITEMAP = """<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>https://www.acme.example/</loc></url>
  <url><loc>https://www.acme.example/contact</loc><lastmod>2026-01-01</lastmod></url>
  <url><loc>https://www.acme.example/about-us</loc></url>
  <url><loc>https://www.acme.example/fr/tarifs</loc></url>
  <url><loc>https://www.acme.example/blog/post-1</loc></url>
  <url><loc>https://www.acme.example/services/web-design.html</loc></url>
</urlset>"""
SECRET = "shot-Tok3n-0a1b2c3d4e5f"


def resolved(declared: list[str], sitemap: str = SITEMAP) -> list[tuple[str | None, str]]:
    return [(r.resolved, r.reason) for r in resolve_routes(declared, sitemap)]


# ---- routes (no service) ------------------------------------------------------------

@unit
def test_declared_route_in_sitemap_resolves_exactly():
    assert resolved(["/contact", "contact", "https://preprod.acme.test/contact?x=1#f", "/"]) == \
        [("/contact", "exact")] * 3 + [("/", "exact")]


@unit
def test_route_differing_by_case_slash_or_extension_resolves_as_normalized():
    assert resolved(["/Contact/", "/services/web-design", "/index.html", "//fr//tarifs/"]) == [
        ("/contact", "normalized"), ("/services/web-design.html", "normalized"), ("/", "normalized"),
        ("/fr/tarifs", "exact")]


@unit
def test_route_absent_from_sitemap_resolves_to_the_closest_entry():
    out = resolve_routes(["/contacts", "/about", "/tarifs", "/servces/web-design"], SITEMAP)
    assert [(r.resolved, r.reason) for r in out] == [
        ("/contact", "closest"), ("/about-us", "closest"), ("/fr/tarifs", "closest"),
        ("/services/web-design.html", "closest")]
    assert all(qa.ROUTE_SIMILARITY <= r.score <= 1 for r in out) and out[2].score < 1


@unit
def test_route_with_no_close_entry_is_route_not_in_sitemap():
    no_root = SITEMAP.replace("<url><loc>https://www.acme.example/</loc></url>", "")
    assert resolved(["/pricing", "/blog/post-2", "/a/b/c/contact", "/blog"]) == [(None, ROUTE_NOT_IN_SITEMAP)] * 4
    assert resolved(["/"], no_root) == [(None, ROUTE_NOT_IN_SITEMAP)]


@unit
@pytest.mark.parametrize("xml", ["not xml at all", "<urlset><url><loc>/x</loc></url>",
                                 '<sitemapindex><sitemap><loc>https://a/s.xml</loc></sitemap></sitemapindex>'])
def test_unreadable_sitemap_raises_sitemap_error(xml):
    with pytest.raises(SitemapError):
        resolve_routes(["/"], xml)


# ---- iso (no service) ---------------------------------------------------------------

def drawing(path: Path, size: tuple[int, int], box: tuple[int, int, int, int] | None = None) -> Path:
    im = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(im)
    w, h = size
    d.rectangle((w // 10, h // 10, w // 2, h // 4), fill="#135")
    if box:
        d.rectangle(box, fill="#f60")
    im.save(path)
    return path


@unit
def test_iso_scales_the_screenshot_to_the_mockup_width(tmp_path):
    shot = drawing(tmp_path / "shot.png", (200, 150))
    mock = drawing(tmp_path / "mock.png", (400, 300))  # the same design exported at 2x
    big = drawing(tmp_path / "big.png", (1000, 750))

    result = iso.compare(shot, mock, tmp_path / "d.png", threshold=0.01)
    capped = iso.compare(shot, big, tmp_path / "d2.png", threshold=0.01)

    assert result.ok and result.compared_size == (400, 300) and result.mismatch_ratio < 0.01
    assert capped.ok and capped.compared_pixels <= iso.MAX_COMPARE_PIXELS


@unit
def test_iso_counts_rows_only_the_longer_image_has(tmp_path):
    shot = drawing(tmp_path / "shot.png", (200, 300))
    mock = tmp_path / "mock.png"
    Image.open(shot).crop((0, 0, 200, 200)).save(mock)

    result = iso.compare(shot, mock, tmp_path / "d.png", threshold=0.2)

    assert result.mismatched_pixels == 200 * 100 and result.mismatch_ratio == pytest.approx(1 / 3)
    assert not result.ok
    assert Image.open(result.diff_image).getpixel((100, 250))[:3] == iso.DIFF_COLOR


@unit
def test_iso_unreadable_mockup_is_an_iso_error(tmp_path):
    (tmp_path / "mock.png").write_text("not a png")
    with pytest.raises(iso.IsoError):
        iso.compare(drawing(tmp_path / "s.png", (10, 10)), tmp_path / "mock.png", tmp_path / "d.png")


# ---- against a deployed site --------------------------------------------------------

@pytest.fixture
def site(tmp_path):
    s = start_site(tmp_path / "site")
    yield s
    s.stop()


def publish(site, files: dict[str, str] | None = None) -> None:
    if files:
        site.commit(files)
    result = site.deploy(site.repo.parent / "state")
    assert result.ok, result.log_tail


@pytest.fixture(scope="module")
def browser():
    with Browser(timeout_s=20) as b:
        yield b


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def no_browser(*args, **kwargs):
    raise AssertionError("a browser was started")


@pytest.mark.integration
@pytest.mark.timeout(30)
def test_missing_page_fails_level1_without_a_browser(site, tmp_path, monkeypatch):
    publish(site)
    monkeypatch.setattr(qa, "Browser", no_browser)

    missing = check_route(site.url, "/nope", tmp_path / "shots" / "nope.png", timeout_s=5)
    down = check_route(f"http://127.0.0.1:{closed_port()}", "/", tmp_path / "shots" / "down.png", timeout_s=5)

    assert (missing.http_status, missing.reasons, missing.screenshot) == (404, ("http_status",), None)
    assert down.http_status is None and down.reasons == ("http_unreachable",) and "refused" in (down.error or "")
    assert not (tmp_path / "shots").exists()


@pytest.mark.integration
@pytest.mark.timeout(30)
def test_fetch_sitemap_reads_the_deployed_one_and_follows_an_index(site, tmp_path):
    publish(site)
    assert sorted(qa.sitemap_paths(qa.fetch_sitemap(site.url, timeout_s=5))) == ["/", "/about", "/contact"]

    served = tmp_path / "indexed"
    served.mkdir()
    (served / "sitemap.xml").write_text(
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        '<sitemap><loc>https://www.acme.example/pages.xml</loc></sitemap></sitemapindex>')
    (served / "pages.xml").write_text(SITEMAP)
    server = serve_directory(served)
    try:
        xml = qa.fetch_sitemap(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5)
    finally:
        server.shutdown()
        server.server_close()
    assert resolved(["/contacts"], xml) == [("/contact", "closest")]
    with pytest.raises(SitemapError, match="HTTP 404"):
        qa.fetch_sitemap(site.url + "/nowhere", timeout_s=5)


@pytest.mark.integration
@pytest.mark.timeout(30)
def test_landing_follows_the_site_s_redirects_and_stays_on_its_site(tmp_path):
    served = tmp_path / "served"
    (served / "contacts").mkdir(parents=True)
    (served / "contacts" / "index.html").write_text("<p>contact</p>")
    server = serve_directory(served)  # http.server redirects a directory without its slash
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert qa.landing(base, "/contacts", timeout_s=5) == "/contacts"  # "/contacts/" is the same path
        assert qa.landing(base, "/nowhere", timeout_s=5) == "/nowhere"  # a 404 lands where it is
    finally:
        server.shutdown()
        server.server_close()
    assert qa.landing(f"http://127.0.0.1:{closed_port()}", "/x", timeout_s=5) == "/x"  # no answer


@unit
def test_routes_resolving_to_one_page_are_one_check_naming_each_route():
    resolutions = resolve_routes(["/contacts", "/pricing", "/contact", "/about", "/tarifs"], SITEMAP)
    redirects = {"/about-us": "/contact"}  # the site sends /about-us to /contact

    checks = qa.plan_checks(resolutions, lambda p: redirects.get(p, p))

    assert [(c.page, [r.declared for r in c.routes]) for c in checks] == [
        ("/contact", ["/contacts", "/contact", "/about"]), (None, ["/pricing"]), ("/fr/tarifs", ["/tarifs"])]
    assert [(c.page, [r.declared for r in c.routes]) for c in qa.plan_checks(resolutions)] == [
        ("/contact", ["/contacts", "/contact"]), (None, ["/pricing"]), ("/about-us", ["/about"]),
        ("/fr/tarifs", ["/tarifs"])]


def chromium_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "chrom" in p.name() or "node" in p.name():
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_clean_page_passes_with_a_private_screenshot_and_its_browser_closed(site, tmp_path):
    publish(site)
    shot = tmp_path / "proof" / "launch-7" / "index.png"

    result = check_route(site.url, "/", shot, timeout_s=20)  # a Chromium of its own

    assert result.ok, result
    assert (result.http_status, result.level1_ok, result.screenshot) == (200, True, shot)
    assert (result.console_errors, result.page_errors, result.failed_requests) == ((), (), ())
    assert mode(shot) == 0o600 and mode(shot.parent) == 0o700 and mode(shot.parent.parent) == 0o700
    with Image.open(shot) as im:
        assert im.format == "PNG" and im.width == qa_browser.VIEWPORT["width"]
    deadline = time.monotonic() + 10
    while chromium_children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert chromium_children() == []


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_javascript_error_is_caught_as_a_page_error(site, browser, tmp_path):
    publish(site, {"site/contact.html": page("Contact", "<p>form</p>",
               head="<script>console.error('contact form: init failed');"
                    "setTimeout(() => { throw new TypeError('late failure') }, 200);</script>"
                    "<script>window.addEventListener('load', () => initForm())</script>")})

    result = check_route(site.url, "/contact", tmp_path / "contact.png", timeout_s=20, browser=browser)

    assert not result.ok and result.level1_ok
    assert any(e.startswith("ReferenceError: initForm is not defined") for e in result.page_errors), result
    assert any(e.startswith("TypeError: late failure") for e in result.page_errors), result
    assert any("contact form: init failed" in e for e in result.console_errors), result
    assert set(result.reasons) == {"page_error", "console_error"}
    assert result.screenshot and result.screenshot.exists()  # still the proof of what it looked like


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_broken_image_is_a_failed_request_with_its_url_redacted(site, browser, tmp_path):
    dead = f"http://127.0.0.1:{closed_port()}/cdn/hero.png"
    publish(site, {"site/about.html": page("À propos", f'<img src="/img/team.png?token={SECRET}"><img src="{dead}">')})
    redactor = Redactor([SECRET])

    result = check_route(site.url, "/about", tmp_path / "about.png", timeout_s=20, browser=browser,
                         redact=redactor.redact_text)

    assert not result.ok and result.reasons == ("failed_request",), result
    assert len(result.failed_requests) == 2, result.failed_requests
    missing = next(f for f in result.failed_requests if "/img/team.png" in f)
    assert missing.endswith("HTTP 404") and SECRET not in missing and "[REDACTED" in missing
    assert any(dead in f and "ERR_CONNECTION_REFUSED" in f for f in result.failed_requests)
    assert result.console_errors == ()  # "Failed to load resource" is reported once, above


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_page_identical_to_its_mockup_passes_and_a_changed_one_is_iso_mismatch(site, browser, tmp_path):
    publish(site)
    first = check_route(site.url, "/", tmp_path / "shots" / "first.png", timeout_s=20, browser=browser)
    assert first.ok and first.screenshot
    mockup = tmp_path / "mockups" / "index.png"
    mockup.parent.mkdir()
    shutil.copy(first.screenshot, mockup)

    same = check_route(site.url, "/", tmp_path / "shots" / "same.png", timeout_s=20, mockup=mockup,
                       iso_threshold=0.01, browser=browser)
    publish(site, {"site/style.css": (site.repo / "site/style.css").read_text().replace("#eef", "#f60")})
    changed = check_route(site.url, "/", tmp_path / "shots" / "changed.png", timeout_s=20, mockup=mockup,
                          iso_threshold=0.01, browser=browser)

    assert same.ok and same.iso and same.iso.mismatch_ratio == 0.0, same
    assert not changed.ok and changed.reasons == (iso.ISO_MISMATCH,), changed
    assert changed.iso and changed.iso.mismatch_ratio > 0.02
    diff = tmp_path / "shots" / "changed.diff.png"
    assert changed.iso.diff_image == diff and mode(diff) == 0o600
    with Image.open(diff) as im:
        assert im.size == changed.iso.compared_size
        assert im.convert("RGB").getcolors(maxcolors=1 << 24) and any(
            rgb == iso.DIFF_COLOR for _, rgb in im.convert("RGB").getcolors(maxcolors=1 << 24))
