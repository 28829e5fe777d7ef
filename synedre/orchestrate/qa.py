"""QA of a pre-production deploy (SPEC §9.3–9.5).

1. Routes: each route the agent declared is re-resolved against the target's real
   `sitemap.xml` (`resolve_routes`), so an iteration is not spent on a 404: an exact
   path, else the same page up to case, trailing slash, `.html` or `index` (`normalized`),
   else the closest entry (`closest`, see `_closest`), else `route_not_in_sitemap`, and
   that route gets no browser run. The routes that resolve to one page (one entry, or one
   redirecting to the other: `landing`) share one check, which names them all (`plan_checks`).
2. Level 1 (`http_status`): the HTTP status of a plain GET, redirects followed.
3. Level 2 (`check_route`, `browser.load_page`): the page in a real headless Chromium
   (Debian's, driven by Playwright's sync API): console errors, uncaught page errors,
   failed requests (network failures, and subresource responses of status 400 or more), and a full-page
   screenshot kept as proof (file 0600, directories created 0700). The page's script is
   the agent's, untrusted: the browser keeps its own sandbox, runs unprivileged and sees
   none of the fleet's files (`browser.Browser`, and the wrapper `chromium-as-qa` beside this file).
4. Mock-up conformity (`iso.compare`) when the route has a mock-up image.

Every network and browser call has a timeout (the `timeout_s` given, per call); the
browser is always closed. Browser-side messages are cut to `page_events.MAX_EVENT_CHARS`, at
most `page_events.MAX_EVENTS` of each kind are kept, and they go through `redact` (a failed URL
may carry a token). A resource that failed is reported once, under failed requests, not again as
the console's "Failed to load resource"; the browser's own `/favicon.ico` probe (not a
request of the page) is not reported.

`BrowserUnavailable` (no Chromium, no QA user, or it would not start), `SitemapError` and
`iso.IsoError` are infrastructure or input errors for the caller to map to a status;
everything the deployed site does wrong is in the results, never raised.
The sync API cannot run inside a running asyncio loop: call this from a plain thread or
process (a Celery prefork or threads worker).
"""
from __future__ import annotations

import difflib
import re
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import ProxyHandler, Request, build_opener
from xml.sax.saxutils import escape

from synedre.orchestrate import iso

# BrowserUnavailable is part of this module's interface (stages/qa.py).
from synedre.orchestrate.browser import (
    Browser,
    BrowserUnavailable as BrowserUnavailable,
    load_page,
)

USER_AGENT = "synedre-qa/1"

ROUTE_NOT_IN_SITEMAP = "route_not_in_sitemap"
# A sitemap path is a candidate for a declared route only if their last segments match
# (the page's own name: "contacts" → "contact", "about" → "about-us"), as strings at least
# this similar (difflib ratio) and with the same digits (post-1 is not post-2)...
SEGMENT_SIMILARITY = 0.75
# ...and the whole paths, as sequences of segments, have at least this difflib ratio
# ("/contact" → "/fr/contact" is 0.67; "/a/b/c/contact" → "/contact" is 0.4).
ROUTE_SIMILARITY = 0.5

MAX_SITEMAP_BYTES = 10 * 1024 * 1024
MAX_CHILD_SITEMAPS = 20


class SitemapError(Exception):
    """The target's sitemap could not be fetched or read."""


def _identity(text: str) -> str:
    return text


# ---- routes -------------------------------------------------------------------------

@dataclass(frozen=True)
class RouteResolution:
    declared: str
    resolved: str | None  # the sitemap's path (its case, no trailing slash)
    reason: str           # exact | normalized | closest | route_not_in_sitemap
    score: float = 0.0


_ABSOLUTE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def normalize_path(route: str) -> str:
    """A declared route or sitemap URL as a path: "/x", no query, no repeated or trailing slash."""
    route = route.strip()
    # only an absolute URL has a host to drop: urlsplit would read "//fr/x" as host "fr"
    raw = urlsplit(route).path if _ABSOLUTE_URL.match(route) else re.split(r"[?#]", route, maxsplit=1)[0]
    path = re.sub(r"/{2,}", "/", raw)
    if not path.startswith("/"):
        path = "/" + path
    return path.rstrip("/") or "/"


def _segments(path: str) -> tuple[str, ...]:
    segs = [s.lower() for s in normalize_path(path).split("/") if s]
    if segs:
        segs[-1] = re.sub(r"\.(html?|php)$", "", segs[-1])
        if segs[-1] == "index":
            segs.pop()
    return tuple(segs)


def _digits(s: str) -> str:
    return "".join(c for c in s if c.isdigit())


def _similar(a: str, b: str) -> float:
    if a == b:
        return 1.0
    if _digits(a) != _digits(b):
        return 0.0
    return difflib.SequenceMatcher(None, a, b).ratio()


def _closest(declared: tuple[str, ...], candidates: Sequence[tuple[str, tuple[str, ...]]]
             ) -> tuple[str, float] | None:
    """The sitemap path nearest to `declared`: among those whose last segment matches it
    (`SEGMENT_SIMILARITY`), the highest segment-sequence ratio over `ROUTE_SIMILARITY`;
    ties go to the closer last segment, then the shorter path, then sitemap order."""
    if not declared:
        return None  # the root only matches the root
    best: tuple[tuple[float, float, int, int], str] | None = None
    for order, (path, segs) in enumerate(candidates):
        if not segs:
            continue
        leaf = _similar(declared[-1], segs[-1])
        if leaf < SEGMENT_SIMILARITY:
            continue
        # each declared segment snapped to its most similar counterpart, so a typo in a
        # prefix ("servces/web") still aligns
        snapped = []
        for d in declared:
            sim, near = max((_similar(d, c), c) for c in segs)
            snapped.append(near if sim >= SEGMENT_SIMILARITY else d)
        score = difflib.SequenceMatcher(None, snapped, list(segs)).ratio()
        if score < ROUTE_SIMILARITY:
            continue
        key = (score, leaf, -len(segs), -order)
        if best is None or key > best[0]:
            best = (key, path)
    return (best[1], best[0][0]) if best else None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _parse(xml_text: str) -> ET.Element:
    try:
        # expat refuses entity-expansion bombs by itself (libexpat >= 2.4)
        return ET.fromstring(xml_text)
    except ET.ParseError as e:
        raise SitemapError(f"sitemap is not valid XML: {e}") from e


def _locs(root: ET.Element, parent: str) -> list[str]:
    return [(loc.text or "").strip() for el in root if _local(el.tag) == parent
            for loc in el if _local(loc.tag) == "loc" and (loc.text or "").strip()]


def sitemap_paths(sitemap_xml: str) -> list[str]:
    """The paths of a `<urlset>` sitemap, in order, each once."""
    root = _parse(sitemap_xml)
    if _local(root.tag) != "urlset":
        raise SitemapError(f"expected a <urlset> sitemap, got <{_local(root.tag)}> (fetch_sitemap flattens an index)")
    return list(dict.fromkeys(normalize_path(u) for u in _locs(root, "url")))


def resolve_routes(declared: list[str], sitemap_xml: str) -> list[RouteResolution]:
    """Each declared route against the sitemap; `SitemapError` if the sitemap is unreadable."""
    paths = sitemap_paths(sitemap_xml)
    exact = set(paths)
    by_segments: dict[tuple[str, ...], str] = {}
    for p in paths:
        by_segments.setdefault(_segments(p), p)
    candidates = [(p, _segments(p)) for p in paths]
    out = []
    for route in declared:
        path, segs = normalize_path(route), _segments(route)
        if path in exact:
            out.append(RouteResolution(route, path, "exact", 1.0))
        elif segs in by_segments:
            out.append(RouteResolution(route, by_segments[segs], "normalized", 1.0))
        elif near := _closest(segs, candidates):
            out.append(RouteResolution(route, near[0], "closest", round(near[1], 3)))
        else:
            out.append(RouteResolution(route, None, ROUTE_NOT_IN_SITEMAP))
    return out


@dataclass(frozen=True)
class PageCheck:
    """One browser check: the page, and every declared route that resolves to it."""
    page: str | None  # None: the route is not in the sitemap, and gets no browser run
    routes: tuple[RouteResolution, ...]  # in declared order; one only when `page` is None


def plan_checks(resolutions: Sequence[RouteResolution], landing: Callable[[str], str] = _identity
                ) -> list[PageCheck]:
    """One check per page: the resolved paths grouped by where they land (`landing`: the
    path after the site's redirects), so `/contact` and `/contacts` resolved, or redirected,
    to one page are one check naming both; an unresolved route is a check of its own."""
    pages: dict[str, list[RouteResolution]] = {}
    checks: list[PageCheck] = []
    lands = {p: landing(p) for p in dict.fromkeys(r.resolved for r in resolutions if r.resolved is not None)}
    for r in resolutions:
        if r.resolved is None:
            checks.append(PageCheck(None, (r,)))
        elif (page := lands[r.resolved]) in pages:
            pages[page].append(r)
        else:
            pages[page] = [r]
            checks.append(PageCheck(page, ()))  # its routes filled in below, in order
    return [c if c.page is None else PageCheck(c.page, tuple(pages[c.page])) for c in checks]


# ---- HTTP ---------------------------------------------------------------------------

# Pre-production is reached directly, as the browser reaches it: no proxy from the environment.
_opener = build_opener(ProxyHandler({}))


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + "/" + path.lstrip("/")


def _get(url: str, timeout_s: float, limit: int) -> bytes:
    with _opener.open(Request(url, headers={"User-Agent": USER_AGENT}), timeout=timeout_s) as resp:
        body: bytes = resp.read(limit + 1)
    if len(body) > limit:
        raise SitemapError(f"{url} is larger than {limit} bytes")
    return body


def _get_sitemap(url: str, timeout_s: float) -> ET.Element:
    try:
        body = _get(url, timeout_s, MAX_SITEMAP_BYTES)
        if body[:2] == b"\x1f\x8b":  # sitemap.xml.gz, or served gzipped without saying so
            body = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, MAX_SITEMAP_BYTES + 1)
            if len(body) > MAX_SITEMAP_BYTES:
                raise SitemapError(f"{url} inflates to more than {MAX_SITEMAP_BYTES} bytes")
    except zlib.error as e:
        raise SitemapError(f"{url}: bad gzip data: {e}") from e
    except HTTPError as e:
        e.close()
        raise SitemapError(f"{url}: HTTP {e.code}") from e
    except (URLError, OSError) as e:  # timeouts are OSError
        raise SitemapError(f"{url}: {getattr(e, 'reason', e)}") from e
    return _parse(body.decode("utf-8", errors="replace"))


def fetch_sitemap(base_url: str, timeout_s: float) -> str:
    """`<base_url>/sitemap.xml` as a `<urlset>`: a sitemap index is followed (its first
    `MAX_CHILD_SITEMAPS` children, fetched from `base_url` whatever host they name, since
    an index written for production names production) and flattened into one urlset."""
    root = _get_sitemap(_url(base_url, "/sitemap.xml"), timeout_s)
    if _local(root.tag) == "urlset":
        locs = _locs(root, "url")
    elif _local(root.tag) == "sitemapindex":
        locs = []
        for child in _locs(root, "sitemap")[:MAX_CHILD_SITEMAPS]:
            sub = _get_sitemap(_url(base_url, urlsplit(child).path), timeout_s)
            locs += _locs(sub, "url")
    else:
        raise SitemapError(f"sitemap root is <{_local(root.tag)}>")
    urls = "".join(f"<url><loc>{escape(u)}</loc></url>" for u in locs)
    return f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'


def http_status(url: str, timeout_s: float) -> tuple[int | None, str | None]:
    """Level 1: (final status, None), or (None, why) when no response came."""
    try:
        with _opener.open(Request(url, headers={"User-Agent": USER_AGENT}), timeout=timeout_s) as resp:
            return int(resp.status), None
    except HTTPError as e:
        e.close()
        return e.code, None
    except (URLError, OSError) as e:  # refused, DNS, timeout
        return None, f"GET {url}: {getattr(e, 'reason', e)}"


def landing(base_url: str, path: str, timeout_s: float) -> str:
    """Where `path` lands on the site after its redirects (a path of `base_url`'s site); the
    path itself when there is no answer or a redirect leaves the site."""
    prefix = base_url.rstrip("/")
    try:
        with _opener.open(Request(_url(base_url, path), headers={"User-Agent": USER_AGENT}), timeout=timeout_s) as resp:
            final = str(resp.url)
    except HTTPError as e:
        e.close()
        final = str(e.url)
    except (URLError, OSError):  # level 1 says why, on the check itself
        return path
    if final != prefix and not final.startswith(prefix + "/"):
        return path
    return normalize_path(final[len(prefix):] or "/")


@dataclass(frozen=True)
class RouteResult:
    path: str
    http_status: int | None
    level1_ok: bool
    console_errors: tuple[str, ...] = ()
    page_errors: tuple[str, ...] = ()
    failed_requests: tuple[str, ...] = ()
    screenshot: Path | None = None
    iso: iso.IsoResult | None = None
    # why level 1 got no response, or why the browser could not load or shoot the page
    error: str | None = None

    @property
    def reasons(self) -> tuple[str, ...]:
        """What failed, as stable codes for the iteration prompt and the budgets."""
        out = []
        if not self.level1_ok:
            out.append("http_unreachable" if self.http_status is None else "http_status")
        elif self.error:
            out.append("browser_error")
        out += [code for code, hit in (("console_error", self.console_errors), ("page_error", self.page_errors),
                                       ("failed_request", self.failed_requests)) if hit]
        if self.iso is not None and not self.iso.ok:
            out.append(iso.ISO_MISMATCH)
        return tuple(out)

    @property
    def ok(self) -> bool:
        return not self.reasons


def diff_path_for(shot_path: Path) -> Path:
    return shot_path.with_name(shot_path.stem + ".diff.png")


def check_route(base_url: str, path: str, shot_path: Path, timeout_s: float, mockup: Path | None = None,
                iso_threshold: float = iso.DEFAULT_THRESHOLD, *, browser: Browser | None = None,
                redact: Callable[[str], str] = _identity) -> RouteResult:
    """Level 1, then (if it passed) level 2 in `browser` (or a Chromium of its own), then
    the mock-up comparison when `mockup` is given (diff image beside the screenshot)."""
    if mockup is not None:
        iso.load_image(mockup)  # an unreadable mock-up fails here, before any browser work
    url = _url(base_url, path)
    status, error = http_status(url, timeout_s)
    if status is None or status >= 400:
        return RouteResult(path, status, False, error=redact(error) if error else None)
    if browser is None:
        with Browser(timeout_s) as own:
            return _level2(own, url, path, status, shot_path, timeout_s, mockup, iso_threshold, redact)
    return _level2(browser, url, path, status, shot_path, timeout_s, mockup, iso_threshold, redact)


def _level2(browser: Browser, url: str, path: str, status: int, shot_path: Path, timeout_s: float,
            mockup: Path | None, iso_threshold: float, redact: Callable[[str], str]) -> RouteResult:
    page = load_page(browser, url, shot_path, timeout_s, redact)
    conformity = None
    if mockup is not None and page.screenshot is not None:
        conformity = iso.compare(page.screenshot, mockup, diff_path_for(page.screenshot), iso_threshold)
    return RouteResult(path, status, True, page.console_errors, page.page_errors, page.failed_requests,
                       page.screenshot, conformity, page.error)
