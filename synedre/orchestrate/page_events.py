"""What a page does in QA's browser, gathered for a check (browser.load_page): its console
errors, uncaught page errors and failed requests, cut to `MAX_EVENT_CHARS`, at most
`MAX_EVENTS` of each kind, through `redact`; and the private files a check writes (0600 in
0700 directories)."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import ConsoleMessage, Error as PlaywrightError, Request as PlaywrightRequest, Response

MAX_EVENTS = 50
MAX_EVENT_CHARS = 500


@dataclass
class Events:
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


def private_dir(path: Path) -> None:
    """Create `path` and its missing parents 0700; an existing directory is left as it is."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)  # mkdir's mode is masked by the umask


def write_private(path: Path, data: bytes) -> None:
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)
