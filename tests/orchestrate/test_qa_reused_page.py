"""QA's one page, reused check after check (issue 30, item 5): what a check's page keeps
(cookies, localStorage, sessionStorage, IndexedDB, cache storage, window.name, popups) is
cleared before the next check, whose page sees none of it, on its own origin or on another
port of the same host (cookies do not tell ports apart). A page whose clearing fails is
closed with its context, and the next check gets a new one, as clean.

Real Debian Chromium (`Browser`), two loopback HTTP servers; what a page sees it says on the
console, which the check reports (`console_errors`).
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import Error as PlaywrightError

from synedre.orchestrate.browser import Browser
from synedre.orchestrate.qa import check_route

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

# What a page of this origin can see of an earlier one, said on the console once read.
SEE = """<script>
window.said = (async () => {
  const seen = {cookie: document.cookie, local: Object.keys(localStorage), session: Object.keys(sessionStorage),
                name: window.name, idb: (await indexedDB.databases()).map(d => d.name), caches: await caches.keys()};
  console.error('seen ' + JSON.stringify(seen));
})();
</script>"""
# Everything it can leave behind once it has said what it saw, some of it again as it is
# left (pagehide), and a popup that writes too.
WRITE = """<script>
window.said.then(() => {
document.cookie = 'kept=1; max-age=3600'; localStorage.setItem('kept', '1'); sessionStorage.setItem('kept', '1');
window.name = 'kept'; indexedDB.open('kept', 1); caches.open('kept');
addEventListener('pagehide', () => {
  document.cookie = 'on-leave=1; max-age=3600'; localStorage.setItem('on-leave', '1');
  sessionStorage.setItem('on-leave', '1'); window.name = 'on-leave';
});
window.open('/popup');
});
</script>"""
POPUP = "<script>localStorage.setItem('popup', '1'); document.cookie = 'popup=1; max-age=3600'</script>"
NOTHING = {"cookie": "", "local": [], "session": [], "name": "", "idb": [], "caches": []}


def html(body: str) -> str:
    return f"<!doctype html><html><head><meta charset='utf-8'><title>t</title></head><body>{body}</body></html>"


PAGES = {"/see": html(SEE), "/write": html(SEE + WRITE), "/popup": html(POPUP)}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = PAGES.get(self.path.split("?")[0])
        data = (body or "").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sites() -> Iterator[tuple[str, str]]:
    """Two origins on one host: 127.0.0.1 on two ports (secure contexts: `caches` exists)."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield tuple(f"http://127.0.0.1:{s.server_address[1]}" for s in servers)  # type: ignore[misc]
    for s in servers:
        s.shutdown()
        s.server_close()


def seen(b: Browser, base_url: str, path: str, tmp_path) -> dict:
    result = check_route(base_url, path, tmp_path / "shot.png", 20, browser=b)
    assert result.level1_ok and result.screenshot and not result.page_errors, result
    said = [e for e in result.console_errors if e.startswith("seen ")]
    assert len(said) == 1, result.console_errors
    return json.loads(said[0][len("seen "):].rsplit(" (http", 1)[0])


def test_a_check_sees_nothing_an_earlier_check_left_in_the_reused_page(sites, tmp_path):
    a, b_site = sites
    with Browser(timeout_s=20) as b:
        assert seen(b, a, "/see", tmp_path) == NOTHING
        tab = b._tab
        assert tab is not None
        first = seen(b, a, "/write", tmp_path)
        assert first == NOTHING
        assert b._tab is tab and tab.context.pages == [tab.page]  # one page, reused; the popup closed

        assert seen(b, a, "/write", tmp_path) == NOTHING  # the same page again, same origin
        assert seen(b, a, "/see", tmp_path) == NOTHING
        seen(b, a, "/write", tmp_path)
        assert seen(b, b_site, "/see", tmp_path) == NOTHING  # another port: no cookie of the first
        assert b._tab is tab


def test_the_checks_see_what_they_write_so_the_isolation_test_proves_something(sites, tmp_path):
    """Without the clearing (and with the popup left open), the reader in the page the writer
    left sees everything the writer wrote."""
    a, _ = sites
    with Browser(timeout_s=20) as b:
        seen(b, a, "/see", tmp_path)
        tab = b._tab
        assert tab is not None
        tab.clear = lambda timeout_s: True  # type: ignore[method-assign]
        tab.ready = lambda: True  # type: ignore[method-assign]
        seen(b, a, "/write", tmp_path)
        got = seen(b, a, "/see", tmp_path)
        assert b._tab is tab
    assert "kept=1" in got["cookie"] and "on-leave=1" in got["cookie"] and "popup=1" in got["cookie"]
    assert {"kept", "on-leave", "popup"} <= set(got["local"]) and {"kept", "on-leave"} <= set(got["session"])
    assert got["name"] in ("kept", "on-leave") and got["idb"] == ["kept"] and got["caches"] == ["kept"]


def test_a_page_whose_clearing_fails_is_closed_with_its_context_and_replaced(sites, tmp_path, monkeypatch):
    a, _ = sites
    with Browser(timeout_s=20) as b:
        seen(b, a, "/see", tmp_path)
        tab = b._tab
        assert tab is not None

        def fails(method: str, params: dict | None = None) -> dict:
            raise PlaywrightError("Target page, context or browser has been closed")

        monkeypatch.setattr(tab.cdp, "send", fails)
        seen(b, a, "/write", tmp_path)  # the check itself is unharmed; its clearing fails
        assert b._tab is None and tab.page.is_closed()
        with pytest.raises(PlaywrightError):
            tab.context.new_page()  # the context is gone, with the writer's cookies and storage
        assert seen(b, a, "/see", tmp_path) == NOTHING
        assert b._tab is not None and b._tab is not tab


def test_a_page_opened_after_the_clearing_gets_the_tab_replaced(sites, tmp_path):
    """A page that appeared after `clear` (a popup the driver reported late) may hold what
    the next check must not see: the next check gets a new context instead."""
    a, _ = sites
    with Browser(timeout_s=20) as b:
        seen(b, a, "/see", tmp_path)
        tab = b._tab
        assert tab is not None
        tab.context.new_page()
        assert not tab.ready()
        assert seen(b, a, "/see", tmp_path) == NOTHING
        assert b._tab is not tab and tab.page.is_closed()

