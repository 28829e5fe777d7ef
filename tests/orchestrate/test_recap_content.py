"""What the recap and the alerts say (issue 16, item 4): the page QA checked rather than the
route declared, each failure with its figure, an HTML part a founder reads on a phone with
the screenshots inline, and no live markup from an untrusted string.

Real components: the QA stage (`plan`, `check_one`) in Debian's Chromium against the site
fixture, the deploy stage running a failing `./deploy`, the recap stage and the alert
through the mail facade to Dovecot (the draft) and aiosmtpd (the send); the mail read back
from what aiosmtpd received. The phone rendering opens the received HTML part in Chromium
at 390 px with its `cid:` images resolved from the mail's own parts (rewritten to `data:`
URIs, in this test only) and keeps the picture in build/artifacts/.
"""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from email.message import EmailMessage
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest
from PIL import Image
from psycopg.types.json import Jsonb

from synedre.config import Settings, get_settings
from synedre.pipeline import Status
from tests.mail.fixtures import FOUNDER, insert_founder, use_atlas_mailbox
from tests.services import stack
from tests.services.site import page, send_page, start_site
from tests.services.smtp import start_smtp

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ARTIFACTS = stack.ROOT / "build" / "artifacts"
PHONE = {"width": 390, "height": 844}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
HOSTILE = '<script>alert("cover")</script><img src=x onerror="alert(1)">'
DEPLOY_FAILS = """#!/usr/bin/env bash
echo "deploying $1"
echo "building assets"
echo "error: migration 0042 failed: relation \\"pages\\" does not exist" >&2
exit 3
"""


@pytest.fixture
def env(db, dovecot, tmp_path, monkeypatch):
    """The founder, the atlas mailbox (Dovecot + aiosmtpd), client `acme` whose
    pre-production is `site_url` (set by the test), the QA timeout short."""
    sink = start_smtp()
    use_atlas_mailbox(tmp_path, dovecot, sink, monkeypatch)
    monkeypatch.setenv("SYNEDRE_QA_TIMEOUT_S", "20")
    get_settings.cache_clear()
    with psycopg.connect(db, autocommit=True) as c:
        insert_founder(c, [FOUNDER])
    yield {"url": db, "smtp": sink, "tmp": tmp_path, "monkeypatch": monkeypatch}
    sink.stop()


def client(url: str, preprod: str, hosts: list[str] | None = None) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        cid = c.execute("INSERT INTO synedre.clients (codename, name, deploy_target) VALUES ('acme', 'Acme', 'acme')"
                        " RETURNING id").fetchone()[0]
        c.execute("INSERT INTO synedre.tenant_topology (client_id, deploy_target, config) VALUES (%s, 'acme', %s)",
                  (cid, Jsonb({"preprod_url": preprod, "deploy_hosts": hosts or []})))
        c.execute("INSERT INTO synedre.chantiers (codename, client_id, title) VALUES ('refonte', %s, 'Refonte')",
                  (cid,))


def message(env, status: str, routes: list[str], *, subject: str = "Refonte de la page services",
            cover: str = "Bonjour, pouvez-vous refaire la page services ?", summary: str = "Page services refaite.",
            draft: str = "Bonjour, c'est en ligne. Julien", commits: tuple[str, ...] = ("a1b2c3d",),
            launches: int = 1) -> int:
    """A message as the stages before `status` leave it: ingested (the body is `cover`),
    run + plan, `launches` finished launches whose last contract declares `routes`."""
    from synedre.stages.poll import ingest_one

    raw = (f"From: Paul Martin <contact@garage-martin.fr>\r\nTo: Atlas <atlas@atelier-moreau.fr>\r\n"
           f"Subject: {subject}\r\nDate: Mon, 02 Nov 2026 08:44:00 +0100\r\n"
           f"Message-ID: <recap-{time.monotonic_ns()}@garage-martin.fr>\r\nMIME-Version: 1.0\r\n"
           f"Content-Type: text/plain; charset=utf-8\r\n\r\n{cover}\r\n").encode()
    mid = ingest_one(raw, "atlas", 1, time.monotonic_ns() % 10**9, Settings(state_dir=env["tmp"] / "state"),
                     lambda _: None)
    contract = {"ok": True, "tenant": "acme", "routes_to_qa": routes, "commits": list(commits),
                "summary_md": summary, "draft_reply_for_user": draft}
    with psycopg.connect(env["url"], autocommit=True) as c:
        run = c.execute("INSERT INTO synedre.runs (ref_type, ref_id, title, complexity) VALUES ('atlas_inbox', %s,"
                        " 'refonte', 'plan') RETURNING id", (str(mid),)).fetchone()[0]
        c.execute("UPDATE synedre.email_states SET status = %s, intent = 'run', complexity = 'plan', confidence = 0.9,"
                  " rationale = 'r', run_id = %s, launch_attempt = %s, status_at = now(), chantier_id ="
                  " (SELECT id FROM synedre.chantiers WHERE codename = 'refonte') WHERE message_id = %s",
                  (status, run, launches, mid))
        for n in range(1, launches + 1):
            c.execute("INSERT INTO synedre.launches (message_id, attempt, iteration, status, system_prompt, contract,"
                      " stop_reason, ended_at, cost_usd) VALUES (%s, %s, %s, 'succeeded', 'plan', %s, 'success',"
                      " now(), 0.42)", (mid, n, n, Jsonb(contract)))
    return mid


def deployed_run(env, mid: int, base_url: str) -> None:
    """The qa_runs row a successful deploy writes (what the QA stage reads)."""
    with psycopg.connect(env["url"], autocommit=True) as c:
        c.execute("INSERT INTO synedre.qa_runs (message_id, launch_id, iteration, target, base_url, deploy_ok,"
                  " deploy_exit_code) SELECT %s, id, iteration, 'acme', %s, true, 0 FROM synedre.launches"
                  " WHERE message_id = %s ORDER BY attempt DESC LIMIT 1", (mid, base_url, mid))


def run_qa(mid: int, n: int):
    """The QA stage as the workers run it: plan, then one check per route."""
    from synedre.runner import Done
    from synedre.stages import qa

    planned, pending = qa.plan(mid)
    assert isinstance(planned, Done) and planned.status == Status.QA and pending == n, planned
    results = [qa.check_one(mid) for _ in range(n)]
    assert isinstance(results[-1], Done), results
    return results[-1]


def register_mockup(env, route: str, image: Path) -> None:
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "mockup", "refonte", route, str(image)],
                   env=dict(os.environ), check=True, timeout=60, cwd=stack.ROOT, capture_output=True)


def status(url: str, mid: int) -> str:
    with psycopg.connect(url) as c:
        return c.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (mid,)).fetchone()[0]


def set_status(url: str, mid: int, value: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("UPDATE synedre.email_states SET status = %s WHERE message_id = %s", (value, mid))


def the_mail(env) -> EmailMessage:
    received, = env["smtp"].wait_for(1, timeout=30)
    return received.message


def plain(msg: EmailMessage) -> str:
    return msg.get_body(("plain",)).get_content()


# ---- the page checked, and the recap on a phone ------------------------------------------

def inline_as_data_uris(msg: EmailMessage) -> tuple[str, dict[str, str]]:
    """The HTML part with each `cid:` reference replaced by its part's bytes as a data URI
    (what a mail client does with multipart/related); and Content-ID -> content type."""
    html_part = msg.get_body(("html",))
    related = next(p for p in msg.walk() if p.get_content_type() == "multipart/related")
    parts = {str(p["Content-ID"]).strip("<>"): p for p in related.iter_parts() if p["Content-ID"]}
    html = html_part.get_content()
    for cid in re.findall(r'src="cid:([^"]+)"', html):
        p = parts[cid]  # every image the HTML names is a part of the same related body
        data = base64.b64encode(p.get_content()).decode()
        html = html.replace(f'src="cid:{cid}"', f'src="data:{p.get_content_type()};base64,{data}"')
    return html, {cid: p.get_content_type() for cid, p in parts.items()}


def render_on_a_phone(html: str, picture: Path) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, timeout=60_000)
        try:
            ctx = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True,
                                      java_script_enabled=True)
            pg = ctx.new_page()
            pg.set_default_timeout(30_000)
            pg.set_content(html, wait_until="load")
            facts = pg.evaluate("""() => ({
                images: Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,
                    natural: i.naturalWidth, shown: i.getBoundingClientRect().width})),
                scrollWidth: document.documentElement.scrollWidth,
                rows: Array.from(document.querySelectorAll('tr')).map(r => r.innerText)})""")
            picture.parent.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(picture), full_page=True)
            return facts
        finally:
            browser.close()


def test_a_three_route_recap_names_the_page_checked_and_shows_its_screenshots_inline_on_a_phone(env):
    site = start_site(env["tmp"] / "site")
    try:
        site.commit({"site/nos-services.html": page("Nos services", "<p>Sites, refontes, maintenance.</p>")},
                    "services page")
        subprocess.run(["./deploy", "acme", "--preprod"], cwd=site.repo, check=True, capture_output=True, timeout=60)
        client(env["url"], site.url, [site.host])
        mockup = env["tmp"] / "contact-mockup.png"
        Image.new("RGB", (1280, 800), "#ffffff").save(mockup)
        register_mockup(env, "/contact", mockup)
        env["monkeypatch"].setenv("SYNEDRE_ISO_THRESHOLD", "1")  # compared, with its diff image, and passing
        get_settings.cache_clear()
        mid = message(env, "deployed", ["/", "/contact", "/services"])
        deployed_run(env, mid, site.url)
        assert run_qa(mid, 3).status == Status.QA_PASSED

        from synedre.stages import recap
        assert recap.run(mid).status == Status.ACTIONED
    finally:
        site.stop()
    msg = the_mail(env)
    text = plain(msg)
    # the page checked, with the route the agent declared beside it
    assert "- /nos-services (déclarée : /services) : OK" in text, text
    assert "- / : OK" in text and "- /contact : OK" in text and "- /services :" not in text

    html, parts = inline_as_data_uris(msg)
    assert len([t for t in parts.values() if t == "image/png"]) == 4  # three screenshots, the /contact diff
    picture = ARTIFACTS / f"recap-phone-{mid}.png"
    seen = render_on_a_phone(html, picture)
    print(f"\nrecap at {PHONE['width']} px: {picture}")
    shots = [i for i in seen["images"] if i["alt"].startswith("Capture de ")]
    assert [i["alt"] for i in shots] == ["Capture de /", "Capture de /contact", "Capture de /nos-services"]
    assert all(i["complete"] and i["natural"] > 0 for i in seen["images"]), seen["images"]
    assert all(0 < i["shown"] <= PHONE["width"] for i in seen["images"]), seen["images"]
    assert seen["scrollWidth"] <= PHONE["width"], seen  # no sideways scrolling on the phone
    assert any("/nos-services" in r and "déclarée : /services" in r and "OK" in r for r in seen["rows"]), seen
    with Image.open(picture) as im:
        assert im.width == PHONE["width"] * 2 and im.height > PHONE["height"]


# ---- no live markup from an untrusted string ---------------------------------------------

class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[tuple[str, str]] = []
        self.urls: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.handlers += [(tag, k) for k, _ in attrs if k.lower().startswith("on")]
        self.urls += [v or "" for k, v in attrs if k in ("src", "href")]

    def handle_data(self, data):
        self.text.append(data)


def test_a_cover_summary_and_draft_holding_script_and_onerror_leave_no_live_markup(env):
    client(env["url"], "http://127.0.0.1:9")
    mid = message(env, "report_due", [], subject=f"Devis {HOSTILE}", cover=f"Bonjour {HOSTILE} merci",
                  summary=f"Résumé {HOSTILE}", draft=f"Brouillon {HOSTILE}", commits=(f"abc{HOSTILE}",))
    from synedre.stages import recap
    assert recap.run(mid).status == Status.ACTIONED
    msg = the_mail(env)
    html = msg.get_body(("html",)).get_content()
    found = _Markup()
    found.feed(html)
    found.close()
    assert "script" not in found.tags and found.handlers == [], (found.tags, found.handlers)
    assert found.tags.count("img") == 0 and found.urls == []  # no image: nothing was deployed
    # every hostile string is there, as text the founder reads
    shown = "".join(found.text)
    for where in ("Devis ", "Bonjour ", "Résumé ", "Brouillon ", "abc"):
        assert where + HOSTILE in shown, where
    assert HOSTILE in plain(msg)  # the text part says it as it is


# ---- alerts with their figures -----------------------------------------------------------

class _Preprod(BaseHTTPRequestHandler):
    """A pre-production whose /erreur answers HTTP 500 and /contact a page."""

    def do_GET(self):  # noqa: N802 - http.server's name
        port = self.server.server_address[1]
        pages = {"/sitemap.xml": ("application/xml", f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                                  f"<url><loc>http://127.0.0.1:{port}/contact</loc></url>"
                                  f"<url><loc>http://127.0.0.1:{port}/erreur</loc></url></urlset>"),
                 "/contact": ("text/html", "<!doctype html><html><head><meta charset='utf-8'><title>Contact</title>"
                                           "</head><body><h1>Contact</h1><form><input name='email'></form>"
                                           "</body></html>")}
        if self.path == "/erreur":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        send_page(self, pages)

    def log_message(self, *args):
        pass


def test_an_escalation_alert_gives_the_iso_share_against_its_threshold_and_the_http_status(env):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Preprod)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        client(env["url"], base)
        mockup = env["tmp"] / "contact-mockup.png"
        Image.new("RGB", (1280, 800), "#c00").save(mockup)  # a red page: far from the real one
        register_mockup(env, "/contact", mockup)
        mid = message(env, "deployed", ["/contact", "/erreur"], launches=3)
        deployed_run(env, mid, base)
        assert run_qa(mid, 2).status == Status.QA_FAILED
    finally:
        server.shutdown()
        server.server_close()
    set_status(env["url"], mid, Status.ESCALATED)  # what the spawn stage does at the budget's end

    from synedre.stages import recap
    assert recap.alert(mid) == "sent"
    text = plain(the_mail(env))
    with psycopg.connect(env["url"]) as c:
        detail = c.execute("SELECT detail FROM synedre.qa_checks WHERE declared = '/contact'").fetchone()[0]
    ratio = json.loads(json.dumps(detail))["iso"]["mismatch_ratio"]
    assert ratio > 0.05
    assert f"- /contact : ÉCHEC — {ratio:.1%} des pixels diffèrent de la maquette (seuil 5.0%)" in text, text
    assert "- /erreur : ÉCHEC — HTTP 500" in text, text
    assert "Itérations : 3 lancement(s) sur un budget de 3" in text, text


def test_a_failed_deploy_alert_gives_its_exit_code_and_the_tail_of_its_log(env):
    repo = env["tmp"] / "repo"
    repo.mkdir()
    (repo / "deploy").write_text(DEPLOY_FAILS)
    (repo / "deploy").chmod(0o755)
    for args in (["init", "-q", "-b", get_settings().workspace_base_branch], ["add", "deploy"],
                 ["-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "deploy"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=30)
    env["monkeypatch"].setenv("SYNEDRE_WORKSPACE_REPO", str(repo))
    get_settings.cache_clear()
    client(env["url"], "http://127.0.0.1:9")
    mid = message(env, "spawned", ["/contact"], launches=3)

    from synedre.stages import deploy, recap
    assert deploy.run(mid).status == Status.QA_FAILED  # a failed deploy is a failed check
    set_status(env["url"], mid, Status.ESCALATED)
    assert recap.alert(mid) == "sent"
    text = plain(the_mail(env))
    assert "Déploiement en préproduction (acme) échoué : code de sortie 3" in text, text
    tail = text.split("Fin de son journal :", 1)[1]
    assert "building assets" in tail and 'error: migration 0042 failed: relation "pages" does not exist' in tail
    assert "Itérations : 3 lancement(s) sur un budget de 3" in text, text


# ---- the pieces ----------------------------------------------------------------------------

def test_an_image_the_html_names_goes_inline_and_the_others_stay_attachments(tmp_path):
    from synedre.mail import compose

    shot, diff, log = tmp_path / "check-7.png", tmp_path / "check-7.diff.png", tmp_path / "deploy.log"
    for p in (shot, diff):
        p.write_bytes(b"\x89PNG\r\n\x1a\n" + p.name.encode())
    log.write_text("log")
    html = f'<p>x</p><img src="cid:{compose.content_id(shot.name)}"><img src="cid:{compose.content_id(diff.name)}">'
    built = compose.build("recap", 7, "<o@x.fr>", FOUNDER, "atlas@atelier-moreau.fr", "s", "le texte", html,
                           [shot, diff, log, tmp_path / "gone.png"])
    msg = built.message
    assert plain(msg).strip() == "le texte"  # the text part, for clients without HTML
    related = next(p for p in msg.walk() if p.get_content_type() == "multipart/related")
    root, *inline = related.iter_parts()
    assert root.get_content_type() == "text/html"
    assert [(str(p["Content-ID"]), p.get_content_disposition(), p.get_content()) for p in inline] == [
        (f"<{compose.content_id(shot.name)}>", "inline", shot.read_bytes()),
        (f"<{compose.content_id(diff.name)}>", "inline", diff.read_bytes())]
    assert [p.get_filename() for p in msg.iter_attachments()] == ["deploy.log"]
    assert [s.name for s in built.skipped] == ["gone.png"]


@pytest.mark.timeout(120)
def _chromes() -> list:
    """This process's Chromium descendants; one that exits while being looked at is gone."""
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "chrom" in p.name():
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def test_a_qa_worker_keeps_one_browser_across_routes_and_relaunches_it_when_it_died(tmp_path, monkeypatch):
    import psutil

    from synedre.orchestrate import browser, qa

    site = start_site(tmp_path / "site")
    monkeypatch.setattr(browser, "_keep", True)
    try:
        subprocess.run(["./deploy", "acme", "--preprod"], cwd=site.repo, check=True, capture_output=True, timeout=60)
        first = browser.kept_browser(20)
        assert first is not None and browser.kept_browser(20) is first  # route after route, the same one
        assert qa.check_route(site.url, "/contact", tmp_path / "a.png", 20, browser=first).ok
        for p in _chromes():
            try:
                p.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(_chromes(), timeout=10)
        again = browser.kept_browser(20)
        assert again is not None and again is not first and again.alive
        assert qa.check_route(site.url, "/about", tmp_path / "b.png", 20, browser=again).ok
        other: list = []
        th = threading.Thread(target=lambda: other.append(browser.kept_browser(20)))
        th.start()
        th.join(10)
        assert other == [None]  # another thread checks with a browser of its own
    finally:
        browser.close_kept_browser()
        site.stop()
    deadline = time.monotonic() + 10
    while _chromes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _chromes()
