"""QA of a pre-production deploy (SPEC §9.3–9.5).

1. Routes: each route the agent declared is re-resolved against the target's real
   `sitemap.xml` (`resolve_routes`), so an iteration is not spent on a 404: an exact
   path, else the same page up to case, trailing slash, `.html` or `index` (`normalized`),
   else the closest entry (`closest`, see `_closest`), else `route_not_in_sitemap`, and
   that route gets no browser run. The routes that resolve to one page (one entry, or one
   redirecting to the other: `landing`) share one check, which names them all (`plan_checks`).
2. Level 1 (`http_status`): the HTTP status of a plain GET, redirects followed.
3. Level 2 (`check_route`): the page in a real headless Chromium (Debian's, driven by
   Playwright's sync API): console errors, uncaught page errors, failed requests
   (network failures, and subresource responses of status 400 or more), and a full-page
   screenshot kept as proof (file 0600, directories created 0700). The page's script is
   the agent's, untrusted: the browser keeps its own sandbox, runs unprivileged and sees
   none of the fleet's files (`Browser`, and the wrapper `chromium-as-qa` beside this file).
4. Mock-up conformity (`iso.compare`) when the route has a mock-up image.

Every network and browser call has a timeout (the `timeout_s` given, per call); the
browser is always closed. Browser-side messages are cut to `MAX_EVENT_CHARS`, at most
`MAX_EVENTS` of each kind are kept, and they go through `redact` (a failed URL may carry
a token). A resource that failed is reported once, under failed requests, not again as
the console's "Failed to load resource"; the browser's own `/favicon.ico` probe (not a
request of the page) is not reported.

`BrowserUnavailable` (no Chromium, no QA user, or it would not start), `SitemapError` and
`iso.IsoError` are infrastructure or input errors for the caller to map to a status;
everything the deployed site does wrong is in the results, never raised.
The sync API cannot run inside a running asyncio loop: call this from a plain thread or
process (a Celery prefork or threads worker).
"""
from __future__ import annotations

import atexit
import difflib
import os
import pwd
import re
import threading
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import ProxyHandler, Request, build_opener
from xml.sax.saxutils import escape

from playwright.sync_api import (
    ConsoleMessage,
    Error as PlaywrightError,
    Page,
    Request as PlaywrightRequest,
    Response,
    TimeoutError as PlaywrightTimeoutError,
    sync_playwright,
)

from synedre.config import Settings, get_settings
from synedre.orchestrate import iso

CHROMIUM = Path("/usr/bin/chromium")
# Debian's chromium, not a Playwright-downloaded build, started through this wrapper (its
# header says how): its own sandbox on, as an unprivileged user, in a mount namespace where
# the fleet's files are empty. The page's JavaScript is the agent's: untrusted code.
CONFINED_CHROMIUM = Path(__file__).with_name("chromium-as-qa")
BWRAP, SETPRIV = Path("/usr/bin/bwrap"), Path("/usr/bin/setpriv")
# The sandbox stays on (Playwright adds --no-sandbox unless told `chromium_sandbox`); the
# rest keeps the browser off the network except for the page itself, and its rendering
# deterministic enough for mock-up comparison.
CHROMIUM_ARGS = ("--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-gpu", "--disable-quic")
VIEWPORT = {"width": 1280, "height": 800}
DEFAULT_TIMEOUT_S = 30.0
# After `load`, up to this long for the network to go idle, so errors thrown from a
# short timer or a late fetch are seen; a page that polls forever is checked as it is then.
SETTLE_S = 3.0
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
MAX_EVENTS = 50
MAX_EVENT_CHARS = 500


class SitemapError(Exception):
    """The target's sitemap could not be fetched or read."""


class BrowserUnavailable(Exception):
    """Chromium is missing or would not start."""


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


# ---- browser ------------------------------------------------------------------------

class Browser:
    """One headless Chromium for one or more `check_route` calls; closed on exit, always.
    Confined (`CONFINED_CHROMIUM`): as `settings.qa_user` when the worker is root, else as
    the worker's user; the paths of `settings.fleet_files()` hidden from it."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, settings: Settings | None = None):
        self.timeout_s, self.settings = timeout_s, settings
        self._pw: Any = None
        self._browser: Any = None

    def __enter__(self) -> Browser:
        env = confinement(self.settings or get_settings())
        try:
            self._pw = sync_playwright().start()
        except PlaywrightError as e:
            raise BrowserUnavailable(f"playwright driver: {_first_line(e)}") from e
        try:
            self._browser = self._pw.chromium.launch(
                executable_path=str(CONFINED_CHROMIUM), chromium_sandbox=True, env=env, headless=True,
                args=list(CHROMIUM_ARGS), timeout=self.timeout_s * 1000)
        except PlaywrightError as e:
            self._pw.stop()
            raise BrowserUnavailable(f"chromium would not start: {_launch_failure(e)}") from e
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._browser.close()
        except PlaywrightError:
            pass  # already gone (crashed); stopping the driver below ends whatever is left
        finally:
            self._pw.stop()

    @property
    def alive(self) -> bool:
        """Whether the browser answers: a round trip (a CDP session opened and closed), since
        the sync API learns that Chromium died only when it next talks to it."""
        try:
            if self._browser is None or not self._browser.is_connected():
                return False
            self._browser.new_browser_cdp_session().detach()
            return True
        except PlaywrightError:
            return False

    def new_context(self) -> Any:
        ctx = self._browser.new_context(viewport=VIEWPORT, device_scale_factor=1, service_workers="block")
        ctx.set_default_timeout(self.timeout_s * 1000)
        ctx.set_default_navigation_timeout(self.timeout_s * 1000)
        return ctx


def confinement(s: Settings) -> dict[str, str]:
    """What the confined browser needs, checked (`BrowserUnavailable` naming what is missing),
    and `_confined_env`'s environment for it; `synedre status` asks the same."""
    for tool, package in ((CHROMIUM, "chromium"), (BWRAP, "bubblewrap"), (SETPRIV, "util-linux")):
        if not os.access(tool, os.X_OK):
            raise BrowserUnavailable(f"{tool} is not an executable (apt-get install {package})")
    if not os.access(CONFINED_CHROMIUM, os.X_OK):
        raise BrowserUnavailable(f"{CONFINED_CHROMIUM} is not an executable (chmod 755 it)")
    return _confined_env(s)


def _confined_env(s: Settings) -> dict[str, str]:
    """The whole environment `CONFINED_CHROMIUM` starts with: Playwright would otherwise pass
    it the worker's own, secrets included. Chromium's is built by the wrapper from nothing.
    `BrowserUnavailable` when the worker is root and the QA user is missing or root: Chromium
    never runs as root."""
    hidden = dict.fromkeys(str(q) for p in s.fleet_files() for q in (p, p.resolve()))
    if any("\n" in p for p in hidden):  # QA_HIDE is one path a line
        raise BrowserUnavailable("a path of the fleet holds a newline: it cannot be hidden from the browser")
    env = {"PATH": "/usr/bin:/bin", "QA_HIDE": "\n".join(hidden)}
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam(s.qa_user)
        except KeyError:
            raise BrowserUnavailable(f"QA user {s.qa_user!r} does not exist (SYNEDRE_QA_USER; scripts/system-deps"
                                     " creates it): Chromium does not run as root") from None
        if user.pw_uid == 0 or user.pw_gid == 0:
            raise BrowserUnavailable(f"QA user {s.qa_user!r} is root or in group root (SYNEDRE_QA_USER):"
                                     " Chromium does not run as root")
        env["QA_RUN_AS"] = f"{user.pw_uid}:{user.pw_gid}"
    return env


# A QA worker checks route after route: starting Playwright's driver and a Chromium for
# each costs seconds of the recap's latency. A process that calls `keep_browser` (each
# Celery child, tasks/qa.py) keeps one Chromium for its checks instead: relaunched when it
# died, after `KEPT_MAX_USES` checks or for another timeout, closed at the child's
# shutdown (and at exit). It belongs to the thread that launched it, as Playwright's sync
# API does: any other thread gets None, and its check starts a Chromium of its own.
KEPT_MAX_USES = 200  # a long-lived Chromium only grows: a fresh one now and then


@dataclass
class _Kept:
    browser: Browser
    thread: int
    timeout_s: float
    uses: int = 0


_kept: _Kept | None = None
_keep = False


def keep_browser() -> None:
    global _keep
    if not _keep:
        _keep = True
        atexit.register(close_kept_browser)


def kept_browser(timeout_s: float) -> Browser | None:
    """This process's browser, launched (`BrowserUnavailable` if it cannot be) or relaunched
    as needed; None when the process keeps none (the check starts its own)."""
    global _kept
    if not _keep or (_kept is not None and _kept.thread != threading.get_ident()):
        return None
    if _kept is not None and (_kept.timeout_s != timeout_s or _kept.uses >= KEPT_MAX_USES or not _kept.browser.alive):
        close_kept_browser()
    if _kept is None:
        _kept = _Kept(Browser(timeout_s).__enter__(), threading.get_ident(), timeout_s)
    _kept.uses += 1
    return _kept.browser


def close_kept_browser() -> None:
    global _kept
    kept, _kept = _kept, None
    if kept is None or kept.thread != threading.get_ident():
        return
    try:
        kept.browser.__exit__(None, None, None)
    except PlaywrightError:
        pass  # the driver is gone already, and the browser with it


_LOG_PREFIX = re.compile(r"^(- )?(\[pid=\d+\]\[(err|out)\] )?")


def _launch_failure(e: PlaywrightError) -> str:
    """The first line, and what the wrapper or Chromium's sandbox said in the browser's log."""
    said = [_LOG_PREFIX.sub("", ln.strip())[:300] for ln in (e.message or str(e)).splitlines()
            if "chromium-as-qa:" in ln or "bwrap:" in ln or "sandbox" in ln.lower()]
    return "; ".join(list(dict.fromkeys([_first_line(e), *said]))[:4])


def _first_line(e: PlaywrightError) -> str:
    lines = (e.message or str(e)).strip().splitlines()  # the rest is Playwright's call log
    return lines[0] if lines else type(e).__name__


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


@dataclass
class _Events:
    redact: Callable[[str], str]
    origin: str
    console: list[tuple[str, str]] = field(default_factory=list)  # (text, source url)
    page: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (text, url)

    def on_console(self, msg: ConsoleMessage) -> None:
        if msg.type != "error":
            return
        source = (msg.location or {}).get("url", "")
        parts = urlsplit(source)
        if msg.text.startswith("Failed to load resource") and parts.path == "/favicon.ico" \
                and f"{parts.scheme}://{parts.netloc}" == self.origin:
            return  # Chromium's own favicon probe, not a request of the page
        self.console.append((msg.text + (f" ({source})" if source else ""), source))

    def on_page_error(self, err: PlaywrightError) -> None:
        frames = [ln.strip() for ln in (err.stack or "").splitlines() if ln.strip().startswith("at ")]
        text = f"{err.name}: {err.message}" if err.name else err.message
        self.page.append(text + (f" {frames[0]}" if frames else ""))

    def on_request_failed(self, request: PlaywrightRequest) -> None:
        self.failed.append((f"{request.method} {request.url}: {request.failure}", request.url))

    def on_response(self, response: Response) -> None:
        req = response.request
        if response.status < 400 or (req.is_navigation_request() and req.frame.parent_frame is None):
            return  # the document's own status is level 1's
        self.failed.append((f"{req.method} {response.url}: HTTP {response.status}", response.url))

    def _bounded(self, items: list[str]) -> tuple[str, ...]:
        kept = [self.redact(t[:MAX_EVENT_CHARS]) for t in items[:MAX_EVENTS]]
        if len(items) > MAX_EVENTS:
            kept.append(f"... and {len(items) - MAX_EVENTS} more")
        return tuple(kept)

    def results(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        failed_urls = {url for _, url in self.failed}
        console = [t for t, src in self.console
                   if not (t.startswith("Failed to load resource") and src in failed_urls)]
        return self._bounded(console), self._bounded(self.page), self._bounded([t for t, _ in self.failed])


def _private_dir(path: Path) -> None:
    """Create `path` and its missing parents 0700; an existing directory is left as it is."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)  # mkdir's mode is masked by the umask


def _write_private(path: Path, data: bytes) -> None:
    _private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _settle(page: Page, timeout_s: float) -> None:
    try:
        page.wait_for_load_state("networkidle", timeout=min(timeout_s, SETTLE_S) * 1000)
    except PlaywrightTimeoutError:
        pass  # never idle (polling, a stream): what the page did so far is what gets checked


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
    parts = urlsplit(url)
    events = _Events(redact=redact, origin=f"{parts.scheme}://{parts.netloc}")
    error: str | None = None
    screenshot: Path | None = None
    context = browser.new_context()
    try:
        page = context.new_page()
        page.on("console", events.on_console)
        page.on("pageerror", events.on_page_error)
        page.on("requestfailed", events.on_request_failed)
        page.on("response", events.on_response)
        try:
            page.goto(url, wait_until="load", timeout=timeout_s * 1000)
            _settle(page, timeout_s)
            png = page.screenshot(full_page=True, timeout=timeout_s * 1000, animations="disabled")
        except PlaywrightError as e:
            error = redact(f"browser: {_first_line(e)}"[:MAX_EVENT_CHARS])
        else:
            _write_private(shot_path, png)
            screenshot = shot_path
    finally:
        try:
            context.close()
        except PlaywrightError:
            pass  # the browser died; Browser.__exit__ stops the driver and what is left of it
    console, page_errors, failed = events.results()
    conformity = None
    if mockup is not None and screenshot is not None:
        conformity = iso.compare(screenshot, mockup, diff_path_for(screenshot), iso_threshold)
    return RouteResult(path, status, True, console, page_errors, failed, screenshot, conformity, error)
