"""One browser check per page (issue 28, acceptance 8): the declared routes that resolve to
one page, through the sitemap or a redirect, are checked once, and the check, the iteration
brief and the recap name every one of them.

Real components, as tests/orchestrate/test_recap_content.py: the QA stage (`plan`,
`check_one`) in Debian's Chromium against the site fixture (or a loopback server that
redirects), the recap through the mail facade to Dovecot and aiosmtpd.
"""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
import pytest

from synedre.orchestrate import qa
from synedre.pipeline import Status
from tests.orchestrate.test_recap_content import (
    client,
    deployed_run,
    env,  # noqa: F401 - the fixture, shared
    message,
    plain,
    run_qa,
    the_mail,
)
from tests.services.site import send_page, start_site

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def browser_checks(monkeypatch):
    """The paths the QA stage opened in the browser, in order."""
    opened: list[str] = []
    real = qa.check_route

    def spy(base_url, path, *args, **kwargs):
        opened.append(path)
        return real(base_url, path, *args, **kwargs)

    monkeypatch.setattr(qa, "check_route", spy)
    return opened


def checks(url: str, mid: int) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute("SELECT c.declared, c.routes, c.resolved, c.status FROM synedre.qa_checks c"
                         " JOIN synedre.qa_runs r ON r.id = c.qa_run_id WHERE r.message_id = %s ORDER BY c.id",
                         (mid,)).fetchall()


def test_contact_and_contacts_resolving_to_one_page_are_one_browser_check_naming_both(env, browser_checks):  # noqa: F811
    site = start_site(env["tmp"] / "site")
    try:
        result = site.deploy(env["tmp"] / "deploy-state")
        assert result.ok, result.log_tail
        client(env["url"], site.url, [site.host])
        mid = message(env, "deployed", ["/contact", "/contacts"])  # the sitemap has /contact only
        deployed_run(env, mid, site.url)
        assert run_qa(mid, 1).status == Status.QA_PASSED  # one route task planned, not two

        from synedre.stages import recap
        assert recap.run(mid).status == Status.ACTIONED
    finally:
        site.stop()
    assert browser_checks == ["/contact"]
    assert checks(env["url"], mid) == [("/contact", ["/contact", "/contacts"], "/contact", "passed")]
    text = plain(the_mail(env))
    assert "- /contact (déclarée : /contact, /contacts) : OK" in text, text
    assert text.count("/contacts") == 1


class _Redirecting(BaseHTTPRequestHandler):
    """A pre-production whose sitemap lists /contact and /contacts, /contacts redirecting to /contact."""

    def do_GET(self):  # noqa: N802 - http.server's name
        port = self.server.server_address[1]
        if self.path == "/contacts":
            self.send_response(301)
            self.send_header("Location", f"http://127.0.0.1:{port}/contact")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        pages = {"/sitemap.xml": ("application/xml", '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                                  f"<url><loc>http://127.0.0.1:{port}/contacts</loc></url>"
                                  f"<url><loc>http://127.0.0.1:{port}/contact</loc></url></urlset>"),
                 "/contact": ("text/html", "<!doctype html><html><head><meta charset='utf-8'>"
                                           "<title>Contact</title><link rel='icon' href='data:,'></head>"
                                           "<body><h1>Contact</h1></body></html>")}
        send_page(self, pages)

    def log_message(self, *args):
        pass


def test_a_route_redirecting_to_another_declared_one_is_checked_once_with_both_named(env, browser_checks):  # noqa: F811
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        client(env["url"], base)
        mid = message(env, "deployed", ["/contacts", "/contact"])  # both in the sitemap, exactly
        deployed_run(env, mid, base)
        assert run_qa(mid, 1).status == Status.QA_PASSED
    finally:
        server.shutdown()
        server.server_close()
    assert browser_checks == ["/contact"]
    assert checks(env["url"], mid) == [("/contacts", ["/contacts", "/contact"], "/contact", "passed")]
    from psycopg.rows import dict_row

    from synedre.orchestrate import iterations
    with psycopg.connect(env["url"], row_factory=dict_row) as conn:
        route, = iterations.summary(conn, mid)["routes"]
    assert (route["routes"], route["resolved"]) == (["/contacts", "/contact"], "/contact")
