"""QA's browser is confined (issue 25, SPEC §13): the page's script is the agent's, so
Chromium keeps its own sandbox, never runs as root, and reads nothing of the fleet.

The page is checked the way the QA stage checks a route (`check_route` in the worker's
kept browser, as `synedre.stages.qa.check_one` calls it), by a root worker (Chromium then
runs as the QA user) and by an unprivileged one (as itself). Its script tries to read
/etc/passwd (any user may), the listing of /, the fleet's mailbox registry and AI key
(world-readable here: only the browser's mount namespace hides them), a file of the state
directory, the checkout's pyproject.toml, through fetch(), XMLHttpRequest and an iframe,
and a system image and a mock-up of the state directory through <img>; then it posts what
it got to the loopback server that served it. The page's load waits for an image that
server holds until the report came, so the browser and the page's renderer are up while
the test reads /proc: who every Chromium process runs as, whether any was told
--no-sandbox, whether a renderer is in Chromium's seccomp and namespace sandbox, what
environment the browser got, and what it sees at the fleet's paths. A same-origin fetch of
a marker shows that the report carries what a read gets.
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from synedre import ROOT
from synedre.config import Settings, get_settings
from synedre.orchestrate import browser, qa
from tests.services.site import logo_png

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="runs Chromium as another user: the worker must be root")
SECRET_ENV = "sk-qa-env-7f3e9a2b41c8"  # in the worker's environment: Chromium must not get it
MARK = {"mailboxes": "mbx-Q7vK2pL9", "key": "key-R4tN8wZ1", "state": "state-H2jD6sX3"}
SAME_ORIGIN = "same-origin-M5cB0eY8"
SYSTEM_PNG = Path("/usr/share/icons/hicolor/48x48/apps/chromium.png")  # Debian's chromium ships it
HOLD_S = 20
WRAPPER_ENV = {"PATH", "LANG", "HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "PWD"}
# What Debian's launcher (/usr/bin/chromium, /etc/chromium.d: its build's public Google API
# keys) and Chromium itself (DBUS_SESSION_BUS_ADDRESS=disabled: in headless) add.
CHROMIUM_ENV = ("CHROME_", "CHROMIUM_", "GOOGLE_", "DBUS_SESSION_BUS_ADDRESS")

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Tarifs</title></head><body>
<h1>Tarifs</h1><img src="/hold" alt="" width="1" height="1">
<script>
const FILES = @FILES@, IMAGES = @IMAGES@;
const late = (ms, value) => new Promise(ok => setTimeout(() => ok(value), ms));
async function byFetch(url) {
  try { const r = await fetch(url); return "read: " + await r.text(); } catch (e) { return "error: " + e; }
}
function byXhr(url) {
  return new Promise(ok => {
    try {
      const x = new XMLHttpRequest(); x.open("GET", url);
      x.onload = () => ok("read: " + x.responseText); x.onerror = () => ok("error"); x.send();
    } catch (e) { ok("error: " + e); }
  });
}
function byIframe(url) {
  const f = document.createElement("iframe"); f.src = url; document.body.appendChild(f);
  const look = () => {
    try { return "frame " + f.contentWindow.location.href + " " + f.contentDocument.documentElement.outerHTML; }
    catch (e) { return "frame not readable: " + e; }  // it loaded something of another origin
  };
  return Promise.race([new Promise(ok => { f.onload = () => ok(look()); }), late(1500)]).then(() => look());
}
function byImage(url) {
  return Promise.race([new Promise(ok => {
    const i = new Image(); i.onload = () => ok("read: " + i.naturalWidth + "x" + i.naturalHeight);
    i.onerror = () => ok("error"); i.src = url; document.body.appendChild(i);
  }), late(1500, "timeout")]);
}
const tries = [["fetch", byFetch], ["xhr", byXhr], ["iframe", byIframe]];
const attempts = [
  ...FILES.flatMap(url => tries.map(([how, f]) => f(url).then(got => ({url, how, got})))),
  ...IMAGES.map(url => byImage(url).then(got => ({url, how: "img", got}))),
  byFetch("/marker.txt").then(got => ({url: "/marker.txt", how: "fetch", got})),
];
Promise.all(attempts).then(reports => fetch("/done", {method: "POST", body: JSON.stringify(reports)}));
</script></body></html>
"""


@dataclass
class Fleet:
    """The fleet's files as the test lays them out, and the settings naming them."""
    base: Path
    mailboxes: Path
    keys: Path
    state: Path
    state_file: Path
    mockup: Path

    @property
    def file_targets(self) -> list[str]:
        return ["file:///etc/passwd", "file:///", *(f"file://{p}" for p in (
            self.mailboxes, self.keys / "mistral", self.state_file, ROOT / "pyproject.toml"))]

    @property
    def image_targets(self) -> list[str]:
        return [f"file://{SYSTEM_PNG}", f"file://{self.mockup}"]


@pytest.fixture
def fleet(monkeypatch) -> Iterator[Fleet]:
    """Outside /tmp (the browser gets an empty /tmp of its own anyway): a mailbox registry
    and an AI key readable by any user, a state directory 0700 with a message's file and a
    mock-up. The worker's settings name them, and its environment holds an API key."""
    assert SYSTEM_PNG.is_file()  # else the image that any user may read would prove nothing
    base = Path(tempfile.mkdtemp(prefix="synedre-qa-confined-", dir="/var/tmp"))
    base.chmod(0o755)
    mailboxes = base / "mailboxes.toml"
    mailboxes.write_text(f'[atlas]\naddress = "atlas@atelier-moreau.fr"\nnote = "{MARK["mailboxes"]}"\n')
    keys = base / "ai-keys"
    keys.mkdir(mode=0o755)
    (keys / "mistral").write_text(MARK["key"])
    state = base / "state"
    state_file = state / "messages" / "1" / "contract.json"
    mockup = state / "mockups" / "refonte" / "index.png"
    for d in (state_file.parent, mockup.parent):
        d.mkdir(mode=0o700, parents=True)
    state_file.write_text(json.dumps({"secret": MARK["state"]}))
    mockup.write_bytes(logo_png())
    for p in (mailboxes, keys / "mistral"):
        p.chmod(0o644)
    for d in (state, *state_file.parents[:2], *mockup.parents[:2]):
        d.chmod(0o700)
    for name, value in {"STATE_DIR": state, "MAILBOXES_FILE": mailboxes, "AI_KEYS_DIR": keys,
                        "MISTRAL_API_KEY": SECRET_ENV}.items():
        monkeypatch.setenv(f"SYNEDRE_{name}", str(value))
    monkeypatch.setattr(browser, "_keep", True)  # a QA worker's child keeps its browser (tasks/qa.py)
    get_settings.cache_clear()
    try:
        yield Fleet(base, mailboxes, keys, state, state_file, mockup)
    finally:
        browser.close_kept_browser()
        get_settings.cache_clear()
        shutil.rmtree(base)


# ---- what the browser processes are, read from /proc while the page is up ---------------

@dataclass
class Seen:
    """What the page reported, and /proc as it was when the report came in."""
    reports: list[dict] = field(default_factory=list)
    procs: list[dict] = field(default_factory=list)
    view: dict[str, str] = field(default_factory=dict)  # fleet path -> what the browser sees there
    home: str = ""  # the browser's HOME (its profile), and who owns it
    home_owner: int | None = None
    # Playwright's profile directories before the check, at the report (with their owner), after
    profiles: tuple[set[Path], dict[Path, int], set[Path]] = (set(), {}, set())
    profile: Path | None = None  # which of them is the browser's HOME (another browser may run beside it)
    error: str = ""  # why /proc could not be read
    done: threading.Event = field(default_factory=threading.Event)


def _proc(p: psutil.Process) -> dict:
    status = Path(f"/proc/{p.pid}/status").read_text()
    seccomp, caps = (re.search(rf"^{k}:\s*(\w+)", status, re.M) for k in ("Seccomp", "CapEff"))
    return {"pid": p.pid, "name": p.name(), "uids": tuple(p.uids()), "cmdline": p.cmdline(),
            "seccomp": int(seccomp.group(1)) if seccomp else None, "caps": int(caps.group(1), 16) if caps else None,
            "userns": os.readlink(f"/proc/{p.pid}/ns/user"), "pidns": os.readlink(f"/proc/{p.pid}/ns/pid"),
            "environ": Path(f"/proc/{p.pid}/environ").read_bytes().decode(errors="replace")}


def processes() -> list[dict]:
    """This test's descendants: the Playwright driver, the wrapper's bubblewrap, Chromium."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            out.append(_proc(p))
        except (psutil.Error, OSError):
            continue  # exited meanwhile
    return out


def chromium(procs: list[dict]) -> list[dict]:
    return [p for p in procs if "chrom" in p["name"]]


def browser_process(procs: list[dict]) -> dict:
    main, = [p for p in chromium(procs) if p["name"] == "chromium" and not any(
        a.startswith("--type=") for a in p["cmdline"])]
    return main


def profiles() -> set[Path]:
    """Playwright's temporary profiles on the host (a fresh one each launch)."""
    return set(Path(tempfile.gettempdir()).glob("playwright_chromiumdev_profile-*"))


def view_from(pid: int, paths: list[Path]) -> dict[str, str]:
    """Each path as the process sees it (its mount namespace, through /proc/PID/root)."""
    out = {}
    for path in paths:
        seen = Path(f"/proc/{pid}/root") / path.relative_to("/")
        try:
            out[str(path)] = "dir " + ",".join(sorted(os.listdir(seen))) if seen.is_dir() else seen.read_text()
        except (OSError, UnicodeDecodeError):  # absent, or a masked file (/dev/null on a nodev mount)
            out[str(path)] = "unreadable"
    return out


def look_at_the_browser(seen: Seen, fleet: Fleet) -> None:
    seen.procs = processes()
    main = browser_process(seen.procs)
    seen.view = view_from(main["pid"], [fleet.keys, fleet.state, fleet.mailboxes, fleet.keys / "mistral",
                                        fleet.state_file, fleet.mockup, ROOT / "pyproject.toml"])
    seen.home = dict(kv.split("=", 1) for kv in main["environ"].split("\0") if "=" in kv)["HOME"]
    home = (Path(f"/proc/{main['pid']}/root") / seen.home.lstrip("/")).stat()
    seen.home_owner = home.st_uid
    for p in profiles():
        st = p.stat()
        seen.profiles[1][p] = st.st_uid
        if (st.st_dev, st.st_ino) == (home.st_dev, home.st_ino):
            seen.profile = p


def serve(page: str, seen: Seen, fleet: Fleet) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/":
                self._send(200, "text/html; charset=utf-8", page.encode())
            elif self.path == "/marker.txt":
                self._send(200, "text/plain", SAME_ORIGIN.encode())
            elif self.path == "/hold":  # the page's load waits for its report
                seen.done.wait(HOLD_S)
                self._send(200, "image/png", logo_png())
            else:
                self._send(404, "text/plain", b"not found")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/done" and not seen.done.is_set():
                try:
                    seen.reports = json.loads(body)
                    look_at_the_browser(seen, fleet)
                except Exception:
                    seen.error = traceback.format_exc()
                seen.done.set()
            self._send(204, "text/plain", b"")

        def _send(self, code: int, ctype: str, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def hostile_page(fleet: Fleet) -> str:
    return PAGE.replace("@FILES@", json.dumps(fleet.file_targets)).replace("@IMAGES@", json.dumps(fleet.image_targets))


def qa_the_hostile_page(fleet: Fleet, check: Callable[[str], dict]) -> Seen:
    """Serve the page, let `check` QA it (given the base URL), return what was seen."""
    seen = Seen()
    seen.profiles[0].update(profiles())
    server = serve(hostile_page(fleet), seen, fleet)
    try:
        result = check(f"http://127.0.0.1:{server.server_address[1]}")
        browser.close_kept_browser()
    finally:
        seen.done.set()  # releases /hold if the report never came
        server.shutdown()
        server.server_close()
    seen.profiles[2].update(profiles())
    assert result["level1_ok"] and result["screenshot"] and not result["page_errors"], result
    return seen


def as_user(uid: int, gid: int, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv],
                          capture_output=True, text=True, timeout=10)


def check_in_kept_browser(base_url: str, shot: Path) -> dict:
    """The QA stage's call (synedre.stages.qa.check_one), in this process's kept browser."""
    result = qa.check_route(base_url, "/", shot, 20, browser=browser.kept_browser(20))
    return {"level1_ok": result.level1_ok, "screenshot": str(result.screenshot or ""),
            "page_errors": list(result.page_errors), "error": result.error}


# ---- what must hold ---------------------------------------------------------------------

def assert_read_nothing(seen: Seen, fleet: Fleet) -> None:
    assert not seen.error, seen.error
    assert seen.done.is_set() and seen.reports, "the page never reported: its script did not run"
    got = {(r["url"], r["how"]): r["got"] for r in seen.reports}
    assert got.pop(("/marker.txt", "fetch")) == f"read: {SAME_ORIGIN}"  # the channel carries a read
    expected = {(u, h) for u in fleet.file_targets for h in ("fetch", "xhr", "iframe")}
    assert set(got) == expected | {(u, "img") for u in fleet.image_targets}
    for (url, how), text in got.items():
        if how == "iframe":  # blocked: the frame stays the parent's empty about:blank
            assert text == "frame about:blank <html><head></head><body></body></html>", (url, text)
        else:
            assert text.startswith("error"), (url, how, text)
    everything = json.dumps(seen.reports)
    for secret in (*MARK.values(), "root:x:0:0", 'name = "synedre"'):
        assert secret not in everything


def assert_confined(seen: Seen, fleet: Fleet, uid: int) -> None:
    chromes = chromium(seen.procs)
    assert len(chromes) >= 3, seen.procs  # the browser, its zygotes, a renderer at least
    main = browser_process(seen.procs)
    assert {p["uids"] for p in chromes} == {(uid, uid, uid)} and uid != 0
    # no capability either, but in the namespaces Chromium's sandbox makes for its children
    assert {p["caps"] for p in chromes if p["userns"] == main["userns"]} == {0}
    assert not [p for p in seen.procs if "--no-sandbox" in p["cmdline"]]
    renderers = [p for p in chromes if "--type=renderer" in p["cmdline"]]
    assert renderers and all(r["seccomp"] == 2 for r in renderers), renderers
    assert all(r["userns"] != main["userns"] and r["pidns"] != main["pidns"] for r in renderers)
    # the browser's environment, which its children inherit (a zygote's /proc environ is
    # overwritten by the title it gives itself)
    names = {kv.split("=", 1)[0] for kv in main["environ"].split("\0") if kv}
    assert SECRET_ENV not in main["environ"] and all(n.startswith(CHROMIUM_ENV) for n in names - WRAPPER_ENV), names
    assert seen.home == "/tmp/profile" and seen.home_owner == uid
    # a profile of its own (its HOME, bound from one of Playwright's), new, the QA user's, and
    # thrown away with the browser
    before, during, after = seen.profiles
    assert seen.profile is not None and seen.profile not in before and during[seen.profile] == uid
    assert seen.profile not in after
    # the browser's own view of the fleet (a compromised browser process sees the same): nothing
    assert seen.view == {str(fleet.keys): "dir ", str(fleet.state): "dir ", **{str(p): "unreadable" for p in (
        fleet.mailboxes, fleet.keys / "mistral", fleet.state_file, fleet.mockup, ROOT / "pyproject.toml")}}


@pytest.mark.integration
@pytest.mark.timeout(90)
@AS_ROOT
def test_a_page_of_a_root_worker_reads_no_file_and_its_chromium_runs_sandboxed_as_the_qa_user(fleet, tmp_path):
    qa_user = pwd.getpwnam(get_settings().qa_user)  # KeyError: scripts/system-deps creates it
    uid, gid = qa_user.pw_uid, qa_user.pw_gid
    # what the QA user reads when only the file modes stand in the way
    readable = as_user(uid, gid, "cat", "/etc/passwd", str(fleet.mailboxes), str(fleet.keys / "mistral"))
    assert readable.returncode == 0
    assert all(m in readable.stdout for m in ("root:x:0:0", MARK["mailboxes"], MARK["key"]))
    assert as_user(uid, gid, "cat", str(fleet.state_file)).returncode != 0  # the state directory is 0700, root's

    seen = qa_the_hostile_page(fleet, lambda url: check_in_kept_browser(url, tmp_path / "shots" / "tarifs.png"))

    assert_read_nothing(seen, fleet)
    assert_confined(seen, fleet, uid)


@pytest.mark.integration
@pytest.mark.timeout(90)
@AS_ROOT
def test_a_page_of_an_unprivileged_worker_reads_none_of_its_own_files_and_its_chromium_is_sandboxed(fleet):
    """A worker that is not root runs Chromium as itself: it owns the state directory, so
    only the browser's mount namespace keeps the page's browser from it. The worker is a
    child of this (root) test turned `nobody` before it starts its browser."""
    worker = pwd.getpwnam("nobody")
    shutil.chown(fleet.base, worker.pw_uid, worker.pw_gid)
    for d in (fleet.state, *fleet.state.rglob("*")):
        os.chown(d, worker.pw_uid, worker.pw_gid)
    assert as_user(worker.pw_uid, worker.pw_gid, "cat", str(fleet.state_file)).stdout == json.dumps(
        {"secret": MARK["state"]})  # its own file: the modes do not stop it

    seen = qa_the_hostile_page(fleet, lambda url: in_child_as(worker, url, fleet.base / "shots" / "tarifs.png"))

    assert_read_nothing(seen, fleet)
    assert_confined(seen, fleet, worker.pw_uid)


def in_child_as(worker: pwd.struct_passwd, base_url: str, shot: Path) -> dict:
    """`check_in_kept_browser` in a forked child that became `worker` (no supplementary
    group); Playwright is started once first, as root, to import what it imports lazily
    (this interpreter's standard library may not be readable by `worker`)."""
    from playwright.sync_api import sync_playwright

    browser.close_kept_browser()  # a child must not share the parent's browser
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            with sync_playwright():
                pass
            os.setgroups([])
            os.setgid(worker.pw_gid)
            os.setuid(worker.pw_uid)
            out = check_in_kept_browser(base_url, shot)
            browser.close_kept_browser()
        except BaseException:
            out = {"level1_ok": False, "screenshot": "", "page_errors": [traceback.format_exc()]}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.unit
@pytest.mark.timeout(30)
@pytest.mark.skipif(os.geteuid() != 0, reason="the QA user is used only when the worker is root")
@pytest.mark.parametrize(("user", "why"), [("synedre-qa-nonexistent", "does not exist"),
                                           ("root", "is root or in group root")])
def test_a_qa_user_missing_or_root_makes_the_browser_unavailable_and_starts_nothing(user, why, tmp_path):
    with pytest.raises(KeyError) if user != "root" else contextlib.nullcontext():
        pwd.getpwnam(user)
    s = Settings(qa_user=user, state_dir=tmp_path / "state")

    with pytest.raises(browser.BrowserUnavailable) as raised:
        with browser.Browser(5, s):
            pass

    message = str(raised.value)
    assert message.startswith(f"QA user {user!r} {why} (SYNEDRE_QA_USER"), message
    assert message.endswith(": Chromium does not run as root"), message
    assert not [p for p in psutil.Process().children(recursive=True) if "node" in p.name() or "chrom" in p.name()]


@pytest.mark.timeout(30)
def test_status_says_who_qa_s_browser_runs_as_or_why_it_cannot(tmp_path):
    from synedre import health
    from synedre.config import Settings

    ok = health.check_qa_browser(Settings(state_dir=tmp_path))
    who = "synedre-qa" if os.geteuid() == 0 else "the worker's user"
    assert ok.ok and ok.detail == f"Chromium runs as {who}, sandboxed", ok
    if os.geteuid() == 0:
        missing = health.check_qa_browser(Settings(state_dir=tmp_path, qa_user="no-such-user"))
        assert not missing.ok and "'no-such-user' does not exist" in missing.detail
        assert missing.detail.endswith("every browser check fails")
