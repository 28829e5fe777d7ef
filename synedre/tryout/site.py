"""The try-out's example client: a real git repository (its site and its `./deploy`) under
`<state dir>/try/client/repo`, and the pre-production host its deploy uploads to.

The repository's `preprod` branch is what the fleet works on: an agent's clone starts from
it, its work is merged back into it, and the deploy runs `./deploy <target> --preprod` in a
fresh checkout of it, as the deploy user inside the sandbox runtime (srt). That sandbox
reaches the network only through its proxy, and only the tenant's `deploy_hosts`; its
NO_PROXY sends 127.0.0.1 around the proxy into the sandbox's own empty loopback, so the
pre-production host listens on 127.0.0.2. The script gets the host's address in a variable
of the tenant's `deploy_env` (the port is chosen at each start), builds the release (the
`site/` directory and a `sitemap.xml`) and uploads it as a tar (`POST /_deploy/<target>`);
the host unpacks it into a fresh directory and swaps a symlink, so it serves the old
release or the new one, never half of one. `/contact` serves `contact.html`.
"""
from __future__ import annotations

import functools
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "127.0.0.2"
TARGET = "dupont"
BRANCH = "preprod"
URL_VARIABLE = "TRY_PREPROD_URL"  # the tenant's deploy_env: where ./deploy uploads

# A deploy script's second half, once it filled $release: the release's sitemap (its URLs on
# @HOST@, the production host) and its upload to the pre-production host (@UPLOAD@/<target>).
# The tests' client site (tests/services/site.py) deploys with it too.
PUBLISH = r"""{
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
  while IFS= read -r page; do
    page=${page#./}; page=${page%.html}; [ "$page" = index ] && page=
    echo "  <url><loc>@HOST@/$page</loc></url>"
  done < <(cd "$release" && find . -name '*.html' | sort)
  echo '</urlset>'
} > "$release/sitemap.xml"
tar -C "$release" -cf - . | curl -sS --fail-with-body -m 60 --data-binary @- "@UPLOAD@/$target"
echo
rm -rf "$release"
"""
DEPLOY = r"""#!/usr/bin/env bash
# Publishes this checkout's site/ to pre-production: ./deploy TARGET --preprod
# (TRY_PREPROD_URL, given by the fleet, is the pre-production host)
set -euo pipefail
[ $# -eq 2 ] && [ "$2" = "--preprod" ] || { echo "usage: ./deploy TARGET --preprod" >&2; exit 2; }
target=$1
here=$(cd "$(dirname "$0")" && pwd)
echo "deploying $target from $(git -C "$here" rev-parse --short HEAD)"
release=$(mktemp -d)
cp -R "$here/site/." "$release/"
""" + PUBLISH.replace("@HOST@", "https://www.boulangerie-dupont.example").replace(
    "@UPLOAD@", "$TRY_PREPROD_URL/_deploy")
STYLE = "body { font-family: sans-serif; margin: 40px; } h1 { color: #6b3e12; } footer { color: #777; }\n"


def _page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="fr"><head><meta charset="utf-8"><title>{title}</title>'
            f'<link rel="stylesheet" href="/style.css"></head><body><h1>{title}</h1>{body}'
            '<footer>Boulangerie Dupont, 12 rue des Lilas, Lyon</footer></body></html>\n')


FILES = {
    "deploy": DEPLOY,
    "site/index.html": _page("Boulangerie Dupont", "<p>Pains, viennoiseries et gâteaux sur commande.</p>"
                                                   '<a href="/contact">Contact</a>'),
    "site/contact.html": _page("Contact", "<p>Téléphone : 04 78 00 00 00</p>"
                                          '<form><label>Email <input name="email"></label>'
                                          '<button type="button">Envoyer</button></form>'),
    "site/style.css": STYLE,
    "README.md": "# Boulangerie Dupont\n\nThe site (`site/`) and its deploy: `./deploy dupont --preprod`.\n",
}


def _git(repo: Path, *args: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "Julien Moreau", "GIT_AUTHOR_EMAIL": "julien@atelier-moreau.example",
           "GIT_COMMITTER_NAME": "Julien Moreau", "GIT_COMMITTER_EMAIL": "julien@atelier-moreau.example"}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, timeout=30)


def ensure_repository(repo: Path) -> bool:
    """The example client's repository, created on the first start (later starts keep it, with
    the work the agents merged into it); True if it was just created."""
    if (repo / ".git").is_dir():
        return False
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", BRANCH)
    for rel, content in FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(content)
    (repo / "deploy").chmod(0o755)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "The site as the client has it")
    return True


class _Host(SimpleHTTPRequestHandler):
    publish: Path  # the published releases, one symlink per target

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        target = self.path.removeprefix("/_deploy/")
        if not self.path.startswith("/_deploy/") or not target.isidentifier():
            self.send_error(404)
            return
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        release = Path(tempfile.mkdtemp(prefix=f".release-{target}.", dir=self.publish))
        try:
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(release, filter="data")
        except tarfile.TarError as exc:
            shutil.rmtree(release, ignore_errors=True)
            self.send_error(400, f"not a tar: {exc}")
            return
        release.chmod(0o755)
        publish(self.publish, target, release)
        body = f"published {sum(1 for _ in release.rglob('*.html'))} pages to {target}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def translate_path(self, path: str) -> str:
        fs = super().translate_path(path)
        return fs + ".html" if not os.path.exists(fs) and os.path.exists(fs + ".html") else fs

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass


def publish(root: Path, target: str, release: Path) -> None:
    """Serve `release` for `target` from now on (a symlink swapped at once), the old one removed."""
    link, nxt = root / target, root / f".next-{target}"
    old = link.resolve() if link.is_symlink() else None
    nxt.unlink(missing_ok=True)
    nxt.symlink_to(release)
    os.replace(nxt, link)
    if old is not None and old != release:
        shutil.rmtree(old, ignore_errors=True)


def publish_repository(repo: Path, root: Path, target: str = TARGET) -> None:
    """The repository's site as it stands, published without a deploy: what pre-production shows
    before the first one."""
    release = Path(tempfile.mkdtemp(prefix=f".release-{target}.", dir=root))
    shutil.copytree(repo / "site", release, dirs_exist_ok=True)
    release.chmod(0o755)
    publish(root, target, release)


def serve(root: Path, port: int, target: str = TARGET, host: str = HOST) -> ThreadingHTTPServer:
    """The pre-production host on `host`:`port` (0: a free one), in a daemon thread: it serves
    `target`'s published release and takes the deploy's uploads."""
    root.mkdir(parents=True, exist_ok=True)
    handler = type("Host", (_Host,), {"publish": root})
    server = ThreadingHTTPServer((host, port), functools.partial(handler, directory=str(root / target)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="try-preprod", daemon=True).start()
    return server
