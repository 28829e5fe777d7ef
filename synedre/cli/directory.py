"""`synedre directory`: import the founder, clients, tenants and chantiers, show them, and
attach mock-ups to a chantier's routes."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from synedre.cli.common import USAGE, console, fail, listing, need_database, sub_app
from synedre.config import get_settings

app = sub_app("Founder, clients and their people, tenants, chantiers, mock-ups.")


@app.command("mockup")
def directory_mockup(chantier: Annotated[str, typer.Argument(help="The chantier's codename (from the directory)")],
                     route: Annotated[str, typer.Argument(help="The page's route, e.g. /contact")],
                     image: Annotated[Path, typer.Argument(help="The mock-up, a PNG or JPEG image")]) -> None:
    """Attach a mock-up image to a route of a chantier: QA compares the page with it."""
    import hashlib
    import re
    import shutil

    from synedre import db
    from synedre.db import directory, proofs
    from synedre.orchestrate import iso

    try:
        iso.load_image(image)
    except (OSError, iso.IsoError) as exc:
        fail(f"{image}: not a readable image ({exc})", USAGE)
    need_database()
    with db.transaction() as conn:
        chantier_id = directory.chantier_id(conn, chantier)
        if chantier_id is None:
            fail(f"no chantier {chantier!r} (`synedre directory show` lists them)")
        # a private copy: QA workers must not depend on the operator's file staying put
        target = (get_settings().state_dir / "mockups" / chantier).resolve()
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        # readable, and unique per route: /a/b and /a-b make the same slug, not the same file
        slug = re.sub(r"[^A-Za-z0-9]+", "-", route).strip("-") or "root"
        copy = target / f"{slug}-{hashlib.sha256(route.encode()).hexdigest()[:8]}.png"
        shutil.copyfile(image, copy)
        os.chmod(copy, 0o600)
        try:  # in the database: QA workers on other hosts compare with it too
            proof = proofs.store(conn, copy.read_bytes(), "mockup")
        except proofs.ProofError as exc:
            fail(f"{image}: {exc}", USAGE)
        directory.set_mockup(conn, chantier_id, route, str(copy), proof)
    console.print(f"mock-up for {chantier} {route}: {copy}")


@app.command("import")
def directory_import(file: Annotated[Path, typer.Argument(help="A directory file, JSON: see directory.example.json")]
                     ) -> None:
    """Load the founder, clients with their people and tenants, and chantiers; re-importing
    updates, never duplicates."""
    from synedre import db
    from synedre.db.directory import DirectoryError, import_directory, parse_file

    try:
        d = parse_file(file.read_bytes())
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", USAGE)
    except DirectoryError as exc:
        fail(f"{file}: {exc}")
    need_database()
    with db.transaction() as conn:
        counts = import_directory(conn, d)
    console.print(f"imported {file}: founder {d.founder.name}, " + ", ".join(f"{n} {k}" for k, n in counts.items()))


@app.command("show")
def directory_show(client: Annotated[str | None, typer.Argument(
                       help="A client's codename: its tenant as the fleet uses it (target, pre-production, repository)")
                   ] = None,
                   wide: bool = typer.Option(False, "--wide", help="Long text whole (folded)")) -> None:
    """The directory as the stages read it: the founder, each client with its people and tenant,
    the chantiers; with CLIENT, what the fleet uses for that client."""
    from synedre import db
    from synedre.db import directory

    need_database()
    if client is not None:
        return _show_tenant(client)
    with db.transaction() as conn:
        founder, clients, chantiers = directory.overview(conn)
    if founder is None:
        fail("the directory is empty: `synedre directory import FILE` loads one (see directory.example.json)")
    console.print(f"founder: {escape(founder['name'])} <{', '.join(founder['emails'])}>;"
                  f" Atlas mailbox {founder['atlas_address']}", soft_wrap=True)
    listing([{k: str(v or "") for k, v in r.items()} for r in clients], whole=("codename", "status"),
            wide=wide, empty="no client")
    listing([{k: str(v or "") for k, v in r.items()} for r in chantiers], whole=("codename", "status", "client"),
            wide=wide, empty="no chantier")


def _show_tenant(codename: str) -> None:
    """One client's tenant: what `./deploy` gets, where QA looks, which repository a launch
    clones and merges into on this host."""
    from synedre import db
    from synedre.db import tenants
    from synedre.spawn import repos

    s = get_settings()
    with db.transaction() as conn:
        row = tenants.of_client(conn, codename)
    if row is None:
        fail(f"no client {codename!r} (`synedre directory show` lists them)")
    spec = row["repo"]
    if spec is None:
        repo = (f"{s.workspace_repo} (SYNEDRE_WORKSPACE_REPO, the fleet's default)" if s.workspace_repo
                else "none: each launch works in an empty scratch repository (SYNEDRE_WORKSPACE_REPO is unset)")
    elif (mirror := repos.locate(spec, s)) and (checkout := repos.locate(spec, s, repos.CHECKOUTS)) and mirror.remote:
        repo = f"{spec} (remote: this host's mirror {mirror.path}, its deploy checkout {checkout.path})"
    else:
        repo = f"{spec} (local path{'' if Path(spec, '.git').exists() else ', no git repository there on this host'})"
    for label, value in (("client", f"{codename} ({row['name']})"),
                         ("deploy target", row["target"] or "none (no deploy)"),
                         ("pre-production", row["preprod"] or "none (QA has nowhere to look)"),
                         ("repository", repo), ("base branch", s.workspace_base_branch)):
        console.print(f"{label}: {escape(value)}", soft_wrap=True)
