"""A client's web site for deploy and QA tests: a git repository, its `deploy` script,
and a loopback HTTP server for the published pre-production.

    site = start_site(tmp_path / "site")       # repo with site/{index,contact,about}.html
    run_deploy(site.repo, site.target, ...)    # ./deploy acme --preprod publishes main
    site.url                                   # http://127.0.0.1:PORT, serving the publish
    site.commit({"site/contact.html": "..."})  # what an agent's commit would do
    site.stop()

The deploy script publishes the trunk (`main`, not the work tree) with `git archive`
into a fresh release directory, writes a `sitemap.xml` listing every page (its URLs name
the production host, as a real sitemap does: QA matches paths), then swaps a symlink,
so the server sees either the old release or the new one. `/contact` serves
`contact.html`, as a static host's clean URLs do. The server runs in a thread, on a
free port of 127.0.0.1.
"""
from __future__ import annotations

import functools
import io
import os
import subprocess
import threading
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from PIL import Image, ImageDraw

PRODUCTION_HOST = "https://www.acme.example"

DEPLOY_SCRIPT = r"""#!/usr/bin/env bash
# Publishes main's site/ to pre-production: ./deploy TARGET --preprod
set -euo pipefail
[ $# -eq 2 ] && [ "$2" = "--preprod" ] || { echo "usage: ./deploy TARGET --preprod" >&2; exit 2; }
target=$1
here=$(cd "$(dirname "$0")" && pwd)
root=@PUBLISH_ROOT@
sha=$(git -C "$here" rev-parse --short main)
echo "deploying $target from main@$sha"
release=$(mktemp -d "$root/.release-$target.XXXXXX")
git -C "$here" archive main site | tar -x -C "$release" --strip-components=1
chmod 755 "$release"
{
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
  while IFS= read -r page; do
    page=${page#./}; page=${page%.html}; [ "$page" = index ] && page=
    echo "  <url><loc>@HOST@/$page</loc></url>"
  done < <(cd "$release" && find . -name '*.html' | sort)
  echo '</urlset>'
} > "$release/sitemap.xml"
old=$(readlink "$root/$target" || true)
ln -sfn "$release" "$root/.next-$target" && mv -T "$root/.next-$target" "$root/$target"
[ -z "$old" ] || rm -rf "$old"
echo "published $(grep -c '<loc>' "$release/sitemap.xml") pages to $target"
"""

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


class _CleanURLHandler(SimpleHTTPRequestHandler):
    def translate_path(self, path: str) -> str:
        fs = super().translate_path(path)
        if not os.path.exists(fs) and os.path.exists(fs + ".html"):
            return fs + ".html"
        return fs

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve_directory(directory: Path) -> ThreadingHTTPServer:
    """`directory` over HTTP on a free loopback port, in a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_CleanURLHandler, directory=str(directory)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"site-{directory.name}", daemon=True).start()
    return server


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
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def commit(self, files: dict[str, str | bytes], message: str = "agent change") -> str:
        for rel, content in files.items():
            p = self.repo / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content.encode() if isinstance(content, str) else content)
        _git(self.repo, "add", *files)
        _git(self.repo, "commit", "-q", "-m", message)
        return _git(self.repo, "rev-parse", "HEAD")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_site(root: Path, target: str = "acme") -> Site:
    repo, publish_root = root / "repo", root / "preprod"
    repo.mkdir(parents=True)
    publish_root.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    script = repo / "deploy"
    script.write_text(DEPLOY_SCRIPT.replace("@PUBLISH_ROOT@", _sh_quote(str(publish_root)))
                      .replace("@HOST@", PRODUCTION_HOST))
    script.chmod(0o755)
    site = Site(repo, publish_root, target, serve_directory(publish_root / target))
    site.commit({"deploy": script.read_text(), **PAGES, "site/logo.png": logo_png()}, "the site as the client has it")
    return site


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"
