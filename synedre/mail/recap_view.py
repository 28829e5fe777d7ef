"""What the founder reads in a recap or an alert (SPEC §9.6–9.8): the plain data the mail
templates (synedre/mail/templates/recap.*, alert.*) are filled from, as pure functions of
the facts the recap stage gathered (`orchestrate.iterations.summary` per route).

Each route is named by the page checked (the sitemap's path QA resolved it to), with the
declared route beside it when they differ; a failed route says why with its figure (the
HTTP status, the share of pixels unlike the mock-up against the threshold, the browser's
error). Each screenshot is named by the Content-ID (`compose.content_id`) of the attached
file, so the HTML part shows it inline under its route. No markup here: the templates lay
out the words, and escape every string that came from outside.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from synedre.mail.compose import content_id
from synedre.pipeline import QaCheckStatus, Status

LESSON_CHARS = 300
COVER_CHARS = 1200  # of the client's words quoted back
DEPLOY_TAIL_LINES = 20
EVENT_CHARS = 200
CONTRACT_CHARS = 2000  # of a stopped launch's partial contract, in the alert
# the stored reason codes (orchestrate.qa.RouteResult.reasons, orchestrate.iso.ISO_MISMATCH)
_EVENTS = (("console_error", "console_errors", "erreur(s) dans la console"),
           ("page_error", "page_errors", "erreur(s) JavaScript"),
           ("failed_request", "failed_requests", "requête(s) en échec"))


def checked_page(route: dict[str, Any]) -> tuple[str, str | None]:
    """(the page QA checked, the declared routes that led to it when they are not just that
    page, else None): one check names every route that resolved to its page."""
    page = route.get("resolved") or route["route"]
    routes = list(route.get("routes") or [route["route"]])
    return page, (", ".join(routes) if routes != [page] else None)


def figures(route: dict[str, Any]) -> list[str]:
    """Why a route failed, each reason with its figure; an unknown code as it is."""
    d, reasons = route.get("detail") or {}, list(route.get("reasons") or [])
    out = []
    for code in reasons:
        if code == "http_status":
            out.append(f"HTTP {route.get('http_status')}")
        elif code == "http_unreachable":
            out.append("page injoignable" + (f" ({_cut(d['error'])})" if d.get("error") else ""))
        elif code == "iso_mismatch" and isinstance(d.get("iso"), dict):
            i = d["iso"]
            out.append(f"{i['mismatch_ratio']:.1%} des pixels diffèrent de la maquette "
                       f"(seuil {i['threshold']:.1%})")
        elif code == "route_not_in_sitemap":
            out.append("absente du plan du site (sitemap.xml) : non vérifiée")
        elif code == "browser_error":
            out.append("le navigateur n'a pas pu charger la page" + (f" ({_cut(d['error'])})" if d.get("error")
                                                                     else ""))
        elif (event := next((e for e in _EVENTS if e[0] == code), None)) is not None:
            items = d.get(event[1]) or []
            out.append(f"{len(items)} {event[2]}" + (f", dont : {_cut(items[0])}" if items else ""))
        else:
            out.append(code)
    return out


def route_line(route: dict[str, Any]) -> str:
    """One route for the text part: `/nos-services (déclarée : /services) : OK`."""
    page, declared = checked_page(route)
    name = page + (f" (déclarée : {declared})" if declared else "")
    if route["status"] == QaCheckStatus.PASSED:
        return f"{name} : OK"
    if route["status"] != QaCheckStatus.FAILED:
        return f"{name} : {route['status']}"
    return f"{name} : ÉCHEC — " + "; ".join(figures(route) or ["sans détail"])


def lesson_lines(facts: dict[str, Any]) -> list[str]:
    """The lessons the launches were given, each saying whether the agent applied it (its
    contract's `lessons_applied`)."""
    applied = set(getattr(facts.get("contract"), "lessons_applied", None) or [])
    return [f"#{x['id']} ({'appliquée' if x['id'] in applied else 'non citée par l’agent'}) "
            f"{excerpt(x['title'] + ' : ' + x['body'], LESSON_CHARS)}" for x in facts.get("lessons") or []]


def deploy_view(qa: dict[str, Any]) -> dict[str, Any] | None:
    """A failed deploy: its target, exit code and the tail of its log; None when it succeeded."""
    if not qa.get("iteration") or qa["deployed"]:
        return None
    tail = (qa.get("deploy_log") or "").splitlines()[-DEPLOY_TAIL_LINES:]
    return {"target": qa.get("target"), "exit_code": qa.get("deploy_exit_code"), "tail": tail}


def _cut(text: Any, n: int = EVENT_CHARS) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[:n - 1] + "…"


def excerpt(text: str | None, n: int = COVER_CHARS) -> str:
    s = (text or "").strip()
    return s if len(s) <= n else s[:n - 1].rstrip() + "…"


# ---- what changed (synedre/spawn/changes.py, stored per launch) ---------------------

MAX_FILES_SHOWN = 60
SHORT_SHA = 12


def patch_name(change: dict[str, Any]) -> str:
    """The attached patch's file name: the launch's branch, `synedre/msg-7-a1` -> `msg-7-a1.patch`."""
    branch = str(change["branch"]).removeprefix("synedre/")
    return (re.sub(r"[^A-Za-z0-9._-]+", "-", branch).strip("-.") or f"launch-{change['launch_id']}") + ".patch"


def _counts(f: dict[str, Any]) -> str:
    return "binaire" if f["added"] is None else f"+{f['added']} −{f['removed']}"


def change_head(change: dict[str, Any]) -> str:
    """`Branche synedre/msg-7-a1 (itération 1), 2 commit(s) : 1a2b3c4d5e6f « subject », …`"""
    commits = ", ".join(f"{sha[:SHORT_SHA]} « {subject} »" for sha, subject in change["commits"])
    return (f"Branche {change['branch']} (itération {change['iteration']}), {len(change['commits'])} commit(s) : "
            + commits)


def change_total(change: dict[str, Any]) -> str:
    files = change["files"]
    return (f"{len(files)} fichier(s) : +{sum(f['added'] or 0 for f in files)} "
            f"−{sum(f['removed'] or 0 for f in files)}")


def patch_notes(change: dict[str, Any]) -> list[str]:
    """What the attached patch is: where it applies, and what it leaves out and why."""
    kept, whole, out = len(change["patch"]), change["patch_bytes"], change["left_out"]
    notes = []
    if kept:
        notes.append(f"Correctif joint : {patch_name(change)} ({kept} octets, secrets masqués), à appliquer sur le "
                     f"commit {change['base_sha'][:SHORT_SHA]} (git apply).")
    if out:
        notes.append(f"Correctif coupé à {kept} octets sur {whole} (limite de taille) : laissé(s) de côté en tout "
                     f"ou partie : {', '.join(out)}. Le reste est dans le dépôt (commits ci-dessus)."
                     if kept else f"Correctif non joint : {whole} octets, au-delà de la limite de taille. "
                     f"Il est dans le dépôt (commits ci-dessus).")
    if change["has_binary"]:
        notes.append("Le contenu des fichiers binaires n'est pas dans le correctif : pour eux, voir le dépôt.")
    if change["altered"]:
        notes.append("Des lignes existantes y ont été masquées (secret) : il ne s'applique plus tel quel.")
    return notes


def change_view(change: dict[str, Any], notes: bool = True) -> dict[str, Any]:
    """One launch's "what changed": its branch and commits, a row per file with its lines
    added and removed (the first `MAX_FILES_SHOWN`), the totals; with `notes`, what the
    attached patch is."""
    files = change["files"]
    return {"branch": change["branch"], "iteration": change["iteration"], "head": change_head(change),
            "commits": [{"sha": sha[:SHORT_SHA], "subject": subject} for sha, subject in change["commits"]],
            "files": [{"path": f["path"], "binary": f["added"] is None, "added": f["added"], "removed": f["removed"],
                       "counts": _counts(f)} for f in files[:MAX_FILES_SHOWN]],
            "more": max(0, len(files) - MAX_FILES_SHOWN), "total": change_total(change),
            "notes": patch_notes(change) if notes else []}


# ---- the mails' data -----------------------------------------------------------------

def shot_view(path: Path | str | None, alt: str, caption: str) -> dict[str, Any]:
    """A proof image: its Content-ID when the file is there to attach, else None."""
    return {"cid": content_id(Path(path).name) if path and Path(path).is_file() else None, "alt": alt,
            "caption": caption}


def route_view(route: dict[str, Any]) -> dict[str, Any]:
    """One checked page: its name, verdict, figures and proofs (the screenshot, then the
    mock-up diff beside it, each cell `width` percent wide)."""
    page, declared = checked_page(route)
    ok = route["status"] == QaCheckStatus.PASSED
    shots = [(route.get("screenshot"), f"Capture de {page}", "Capture")]
    if route.get("diff_image"):
        shots.append((route["diff_image"], f"Écart avec la maquette, {page}", "Écart avec la maquette"))
    return {"page": page, "declared": declared, "ok": ok, "line": route_line(route),
            "figures": [] if ok else figures(route), "width": 100 // len(shots),
            "shots": [shot_view(*s) for s in shots if s[0]]}


def qa_view(qa: dict[str, Any]) -> dict[str, Any]:
    return {"target": qa.get("target"), "iteration": qa.get("iteration"),
            "routes": [route_view(r) for r in qa["routes"]]}


def cost_line(facts: dict[str, Any]) -> str:
    return f"Coût : {float(facts['cost']):.2f} USD ({facts['launches']} lancement(s))"


def recap(facts: dict[str, Any], draft: str, summary: str, commits: Sequence[str]) -> dict[str, Any]:
    """The recap's data: asked, intent, done, what changed, lessons, QA per route, cost, draft."""
    return {"subject": facts["subject"] or "(sans objet)", "sender": facts["envelope_from"] or "?",
            "intent": facts["intent"], "complexity": facts["complexity"], "cover": facts.get("cover") or "",
            "summary": summary, "commits": list(commits), "lessons": lesson_lines(facts),
            "changes": [change_view(c) for c in facts.get("changes") or []], "qa": qa_view(facts["qa"]),
            "cost": cost_line(facts), "draft": draft}


def alert(facts: dict[str, Any], events: Sequence[str], done: int, limit: int, only_iso: bool) -> dict[str, Any]:
    """The alert's data: the status and its last events, the launch's stop or failed merge,
    a failed deploy, each route's verdict and the launches made against the budget."""
    launch = facts["launch"]
    salvage = launch.get("salvage") or {}
    stopped = merge = None
    if facts["status"] == Status.SPAWN_FAILED:
        stopped = {"reason": launch.get("stop_reason"), "branch": salvage.get("branch") or launch.get("branch"),
                   "commits": list(salvage.get("commits") or []), "resumable": bool(salvage.get("resumable")),
                   "contract": str(salvage["contract"])[:CONTRACT_CHARS] if salvage.get("contract") else ""}
    if facts["status"] == Status.MERGE_FAILED:
        merge = {"why": salvage.get("merge"), "branch": launch.get("branch")}
    return {"subject": facts["subject"] or "(sans objet)", "status": facts["status"], "events": list(events),
            "stopped": stopped, "merge": merge, "deploy": deploy_view(facts["qa"]), "qa": qa_view(facts["qa"]),
            "done": done, "limit": limit, "only_iso": only_iso}
