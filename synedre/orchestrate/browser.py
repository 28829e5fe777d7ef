"""QA's browser (SPEC §9.4): one headless Chromium, confined, and what a page does in it.

The browser is Debian's Chromium driven by Playwright's sync API, started through the wrapper
`chromium-as-qa` beside this file: its own sandbox on, as an unprivileged user, the fleet's
files hidden (`Browser`, `confinement`). A QA worker's process may keep one for check after
check (`keep_browser`, `kept_browser`). `load_page` loads a page there and gathers its console
errors, uncaught page errors and failed requests (page_events.py: cut, bounded, redacted), and
its full-page screenshot (file 0600, directories 0700), in the browser's one page (`_Tab`):
reused check after check, everything a check could leave for the next one cleared in between.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import (
    Error as PlaywrightError,
    Page,
    Request as PlaywrightRequest,
    TimeoutError as PlaywrightTimeoutError,
    sync_playwright,
)

from synedre.config import Settings, get_settings
from synedre.orchestrate.page_events import MAX_EVENT_CHARS, Events, write_private

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
# Clearing a page between checks is a few round trips to the browser; a page that holds its
# renderer longer than this (a script in a loop) gets its context closed instead.
CLEAR_TIMEOUT_S = 5.0


class BrowserUnavailable(Exception):
    """Chromium is missing or would not start."""


class Browser:
    """One headless Chromium for one or more `check_route` calls; closed on exit, always.
    Confined (`CONFINED_CHROMIUM`): as `settings.qa_user` when the worker is root, else as
    the worker's user; the paths of `settings.fleet_files()` hidden from it."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, settings: Settings | None = None):
        self.timeout_s, self.settings = timeout_s, settings
        self._pw: Any = None
        self._browser: Any = None
        self._tab: _Tab | None = None

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

    @contextlib.contextmanager
    def page(self) -> Iterator[Page]:
        """The page for one check: the browser's reused one (`_Tab`), cleared once the check
        is done; one that could not be cleared is closed with its context, and the next check
        gets a new one. Not reentrant: one check at a time, as the sync API runs them."""
        tab, self._tab = self._tab, None
        if tab is None or not tab.ready():
            if tab is not None:
                tab.close()
            context = self.new_context()
            try:
                tab = _Tab(context)
            except PlaywrightError:
                context.close()
                raise
        try:
            yield tab.page
        finally:
            if tab.clear(min(self.timeout_s, CLEAR_TIMEOUT_S)):
                self._tab = tab
            else:
                tab.close()


# A blank document served at an origin the check visited, in the check's own tab: no script
# of the site runs in it, so what it runs is the browser's own sessionStorage and window.name.
_CLEAR_PATH = "/.synedre-qa-clear"
_BLANK = "<!doctype html><title></title>"


class _Tab:
    """A context and its one page, reused check after check. Opening a page is most of a
    check's CPU here (its renderer process and, headless, its window: measured ~1 s of CPU
    against ~0.3 s for the rest of a check), and nothing the page keeps survives `clear`:

    - every other page of the context (popups): closed;
    - the document, its timers, workers and connections: the page leaves it (its unload
      handlers run then, before what follows clears what they wrote);
    - for each origin any page of the context requested (documents, frames, redirects): its
      sessionStorage and the tab's window.name, cleared from a blank document of that origin
      (`_CLEAR_PATH`, answered here, never by the site: the page stays on the last one, a
      navigation fewer than about:blank); then its localStorage, IndexedDB, cache storage,
      service workers, file systems and cookies (`Storage.clearDataForOrigin`, "all");
    - every cookie and permission of the context, its HTTP cache, the tab's history.

    A failure anywhere (`clear` says False) and the caller closes the context."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.origins: set[str] = set()
        context.on("request", self._requested)
        self.page = context.new_page()
        self.cdp = context.new_cdp_session(self.page)

    def _requested(self, request: PlaywrightRequest) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https") and parts.path != _CLEAR_PATH:
            self.origins.add(f"{parts.scheme}://{parts.netloc}")

    def ready(self) -> bool:
        """The page is up and alone in its context (nothing opened a page after `clear`)."""
        return not self.page.is_closed() and self.context.pages == [self.page]

    def clear(self, timeout_s: float) -> bool:
        ms = timeout_s * 1000
        try:
            for other in self.context.pages:
                if other is not self.page:
                    other.close()
            origins, self.origins = sorted(self.origins), set()
            if origins:  # leaving the check's document runs its unload handlers first
                self.page.route("**/*", lambda route: route.fulfill(
                    status=200, content_type="text/html", body=_BLANK, headers={"Cache-Control": "no-store"}))
                try:
                    for origin in origins:
                        self.page.goto(origin + _CLEAR_PATH, timeout=ms)
                        self.page.evaluate("() => { sessionStorage.clear(); window.name = '' }")
                finally:
                    self.page.unroute_all()
            else:  # nothing was asked: the check's document, if any, is left for an empty one
                self.page.goto("about:blank", timeout=ms)
                self.page.evaluate("() => { window.name = '' }")
            for origin in origins:
                self.cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
            self.context.clear_cookies()
            self.context.clear_permissions()
            self.cdp.send("Network.clearBrowserCache")
            self.cdp.send("Page.resetNavigationHistory")
        except PlaywrightError:
            return False
        self.origins = set()  # what the blank documents asked (a favicon): nothing of the site's
        return self.ready()

    def close(self) -> None:
        try:
            self.context.close()
        except PlaywrightError:
            pass  # the browser died; Browser.__exit__ stops the driver and what is left of it


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


def keeping() -> bool:
    return _keep


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


def _settle(page: Page, timeout_s: float) -> None:
    try:
        page.wait_for_load_state("networkidle", timeout=min(timeout_s, SETTLE_S) * 1000)
    except PlaywrightTimeoutError:
        pass  # never idle (polling, a stream): what the page did so far is what gets checked


@dataclass(frozen=True)
class PageLoad:
    """What the page did in the browser; `error`: why it could not be loaded or shot."""
    console_errors: tuple[str, ...]
    page_errors: tuple[str, ...]
    failed_requests: tuple[str, ...]
    screenshot: Path | None
    error: str | None


def load_page(browser: Browser, url: str, shot_path: Path, timeout_s: float,
              redact: Callable[[str], str]) -> PageLoad:
    """Level 2 of a check: `url` loaded in the browser's page (`Browser.page`: cleared after,
    nothing of it seen by the next check), its events gathered, its screenshot written to
    `shot_path`."""
    parts = urlsplit(url)
    events = Events(redact=redact, origin=f"{parts.scheme}://{parts.netloc}")
    error: str | None = None
    screenshot: Path | None = None
    with browser.page() as page:
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
            write_private(shot_path, png)
            screenshot = shot_path
        finally:  # the page outlives the check: what it does next is not this check's
            page.remove_listener("console", events.on_console)
            page.remove_listener("pageerror", events.on_page_error)
            page.remove_listener("requestfailed", events.on_request_failed)
            page.remove_listener("response", events.on_response)
    return PageLoad(*events.results(), screenshot, error)
