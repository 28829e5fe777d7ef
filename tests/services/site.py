"""A client's web site for deploy and QA tests: a git repository, its `deploy` script,
and a loopback HTTP server for the published pre-production.

    site = start_site(tmp_path / "site")       # repo with site/{index,contact,about}.html
    site.deploy(tmp_path / "state")            # ./deploy acme --preprod publishes main, confined
    site.url                                   # http://127.0.0.2:PORT, serving the publish
    site.commit({"site/contact.html": "..."})  # what an agent's commit would do
    site.stop()

The deploy script publishes the trunk (`main`, not the work tree) with `git archive`,
writes a `sitemap.xml` listing every page (its URLs name the production host, as a real
sitemap does: QA matches paths), and uploads the release as a tar to the pre-production
host (`POST /_deploy/<target>`, with curl: through the deploy sandbox's proxy, the host
being the tenant's one `deploy_hosts` entry, `site.host`). The server unpacks it into a
fresh release directory, then swaps a symlink, so it serves either the old release or the
new one. `/contact` serves `contact.html`, as a static host's clean URLs do. The server
runs in a thread, on a free port of 127.0.0.2: not 127.0.0.1, which the sandbox runtime
sends around its proxy (NO_PROXY), straight into the sandbox's own empty loopback.
"""
from __future__ import annotations

import io
import os
import subprocess
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from PIL import Image, ImageDraw

from synedre.tryout import site as tryout_site

PRODUCTION_HOST = "https://www.acme.example"
PREPROD_HOST = "127.0.0.2"

DEPLOY_SCRIPT = r"""#!/usr/bin/env bash
# Publishes main's site/ to pre-production: ./deploy TARGET --preprod
set -euo pipefail
[ $# -eq 2 ] && [ "$2" = "--preprod" ] || { echo "usage: ./deploy TARGET --preprod" >&2; exit 2; }
target=$1
here=$(cd "$(dirname "$0")" && pwd)
sha=$(git -C "$here" rev-parse --short main)
echo "deploying $target from main@$sha"
release=$(mktemp -d)
git -C "$here" archive main site | tar -x -C "$release" --strip-components=1
""" + tryout_site.PUBLISH

STYLE = ("body { font-family: sans-serif; margin: 40px; } h1 { color: #135; }\n"
         ".hero { background: #eef; padding: 20px; }\n")


def page(title: str, body: str, head: str = "") -> str:
    return (f'<!doctype html><html lang="fr"><head><meta charset="utf-8"><title>{title}</title>'
            f'<link rel="stylesheet" href="/style.css">{head}</head><body><h1>{title}</h1>{body}</body></html>\n')


def logo_png() -> bytes:
    im = Image.new("RGB", (120, 40), "#135")
    ImageDraw.Draw(im).rectangle((10, 10, 110, 30), fill="#fc0")
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


PAGES = {
    "site/index.html": page("Acme", '<div class="hero"><img src="/logo.png" alt="Acme" width="120" height="40">'
                                    '<p>Bienvenue.</p></div><a href="/contact">Contact</a> <a href="/about">'
                                    'À propos</a>'),
    "site/contact.html": page("Contact", '<form><label>Email <input name="email"></label>'
                                         '<button type="button">Envoyer</button></form>'),
    "site/about.html": page("À propos", "<p>Acme fabrique des enclumes depuis 1949.</p>"),
    "site/style.css": STYLE,
}


def send_page(handler: BaseHTTPRequestHandler, pages: dict[str, tuple[str, str]]) -> None:
    """Answer `handler`'s GET from `pages` (path: content type and body), 404 for another path."""
    ctype, body = pages.get(handler.path, ("text/plain", ""))
    data = body.encode()
    handler.send_response(200 if handler.path in pages else 404)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def serve_directory(directory: Path, publish_root: Path | None = None, host: str = "127.0.0.1"
                    ) -> ThreadingHTTPServer:
    """`directory` over HTTP on a free loopback port, in a daemon thread, with the deploy's
    uploads published into `publish_root` (`directory` being its target's link): the try-out's
    pre-production host (synedre/tryout/site.py)."""
    root = publish_root or directory.parent
    return tryout_site.serve(root, 0, directory.name, host=host)


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.invalid",
           "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True,
                          timeout=30).stdout.strip()


@dataclass
class Site:
    repo: Path
    publish_root: Path
    target: str
    server: ThreadingHTTPServer

    @property
    def host(self) -> str:
        """`host:port`: the tenant's deploy_hosts entry that lets its deploy reach this host."""
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def topology(self) -> dict[str, object]:
        """The tenant_topology.config of a client whose pre-production this is."""
        return {"preprod_url": self.url, "deploy_hosts": [self.host]}

    def commit(self, files: dict[str, str | bytes], message: str = "agent change") -> str:
        for rel, content in files.items():
            p = self.repo / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content.encode() if isinstance(content, str) else content)
        _git(self.repo, "add", *files)
        _git(self.repo, "commit", "-q", "-m", message)
        return _git(self.repo, "rev-parse", "HEAD")

    def deploy(self, state_dir: Path, timeout_s: float = 30, **settings: object):
        """`./deploy` of main as the deploy stage runs it: a fresh checkout, as the deploy
        user, in its sandbox, reaching this host alone."""
        from synedre.config import Settings
        from synedre.stages.deploy import Topology, deploy

        s = Settings(state_dir=state_dir, workspace_base_branch="main", deploy_timeout_s=timeout_s, **settings)
        return deploy(str(self.repo), Topology(self.target, self.url, (self.host,)), s)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_site(root: Path, target: str = "acme") -> Site:
    repo, publish_root = root / "repo", root / "preprod"
    repo.mkdir(parents=True)
    publish_root.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    server = serve_directory(publish_root / target, publish_root, PREPROD_HOST)
    script = repo / "deploy"
    script.write_text(DEPLOY_SCRIPT.replace("@UPLOAD@", f"http://{server.server_address[0]}:"
                                            f"{server.server_address[1]}/_deploy").replace("@HOST@", PRODUCTION_HOST))
    script.chmod(0o755)
    site = Site(repo, publish_root, target, server)
    site.commit({"deploy": script.read_text(), **PAGES, "site/logo.png": logo_png()}, "the site as the client has it")
    return site

