"""What the founder reads in a recap or an alert (SPEC §9.6–9.8), as pure functions of the
facts the recap stage gathered (`orchestrate.iterations.summary` per route).

Each route is named by the page checked (the sitemap's path QA resolved it to), with the
declared route beside it when they differ; a failed route says why with its figure (the
HTTP status, the share of pixels unlike the mock-up against the threshold, the browser's
error). The HTML part is a layout for a phone: one column at most 640 px wide, a table of
routes and verdicts, each screenshot inline under its route (`cid:`, the Content-ID
`compose.content_id` gives the attached file) with the mock-up diff beside it, and the
draft reply set apart. Every string that came from outside (subject, sender, the client's
words, the agent's summary, commits, reasons, the draft) is escaped: the HTML holds no
markup but ours. Inline styles only: mail clients drop `<style>` and scripts.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from synedre.mail.compose import content_id
from synedre.pipeline import QaCheckStatus

NOTHING_DEPLOYED = "Rien n'a été déployé (pas de code à vérifier)."
DRAFT_TITLE = "Brouillon de réponse, à envoyer vous-même"
LESSONS_TITLE = "Leçons données à l'agent"
LESSON_CHARS = 300
COVER_CHARS = 1200  # of the client's words quoted back
DEPLOY_TAIL_LINES = 20
EVENT_CHARS = 200
# the stored reason codes (orchestrate.qa.RouteResult.reasons, orchestrate.iso.ISO_MISMATCH)
_EVENTS = (("console_error", "console_errors", "erreur(s) dans la console"),
           ("page_error", "page_errors", "erreur(s) JavaScript"),
           ("failed_request", "failed_requests", "requête(s) en échec"))
_FONT = "font-family:-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif"
_CELL = "padding:8px 6px;border-bottom:1px solid #e3e3e3;vertical-align:top;text-align:left"


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


def deploy_lines(qa: dict[str, Any]) -> list[str]:
    """A failed deploy: its exit code and the tail of its log; nothing when it succeeded."""
    if not qa.get("iteration") or qa["deployed"]:
        return []
    tail = (qa.get("deploy_log") or "").splitlines()[-DEPLOY_TAIL_LINES:]
    return [f"Déploiement en préproduction ({qa.get('target')}) échoué : code de sortie "
            f"{qa.get('deploy_exit_code')}", "Fin de son journal :", *(f"  {ln}" for ln in tail or ["(vide)"])]


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


def change_lines(changes: Sequence[dict[str, Any]], notes: bool = True) -> list[str]:
    """The text part's "what changed": per launch its branch and commits, a line per file with
    its lines added and removed, the totals; with `notes`, what the attached patch is."""
    lines: list[str] = []
    for c in changes:
        files = c["files"]
        lines += [change_head(c), *(f"  {_counts(f):>12}  {f['path']}" for f in files[:MAX_FILES_SHOWN])]
        if len(files) > MAX_FILES_SHOWN:
            lines.append(f"  … et {len(files) - MAX_FILES_SHOWN} autre(s) fichier(s)")
        lines.append(f"  {change_total(c)}")
        lines += patch_notes(c) if notes else []
    return lines


def _change_table(c: dict[str, Any]) -> str:
    files = c["files"]
    rows = "".join(
        f'<tr><td style="{_CELL};font-family:monospace;font-size:13px">{_e(f["path"])}</td>'
        + (f'<td style="{_CELL}" colspan="2">binaire</td>' if f["added"] is None else
           f'<td style="{_CELL};color:#17702e;text-align:right">+{f["added"]}</td>'
           f'<td style="{_CELL};color:#b00020;text-align:right">−{f["removed"]}</td>') + "</tr>"
        for f in files[:MAX_FILES_SHOWN])
    if len(files) > MAX_FILES_SHOWN:
        rows += f'<tr><td colspan="3" style="{_CELL}">… et {len(files) - MAX_FILES_SHOWN} autre(s) fichier(s)</td></tr>'
    head = (f'<tr><th style="{_CELL};font-size:13px;color:#555">Fichier</th>'
            f'<th style="{_CELL};font-size:13px;color:#555;text-align:right">Ajoutées</th>'
            f'<th style="{_CELL};font-size:13px;color:#555;text-align:right">Retirées</th></tr>')
    commits = "".join(f'<li><code>{_e(sha[:SHORT_SHA])}</code> {_e(subject)}</li>' for sha, subject in c["commits"])
    return (f'<p style="margin:0 0 6px">Branche <code>{_e(c["branch"])}</code> (itération {_e(c["iteration"])})</p>'
            f'<ul style="margin:0 0 8px;padding-left:20px;font-size:14px">{commits}</ul>'
            '<table role="presentation" style="width:100%;border-collapse:collapse;font-size:14px">'
            f'{head}{rows}<tr><td colspan="3" style="{_CELL};color:#555">{_e(change_total(c))}</td></tr></table>'
            + "".join(_para(n, "color:#555;font-size:13px;margin-top:6px") for n in patch_notes(c)))


def _changes(changes: Sequence[dict[str, Any]]) -> str:
    return _h2("Ce qui a changé") + "".join(_change_table(c) for c in changes)


# ---- HTML ---------------------------------------------------------------------------

def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _h2(title: str) -> str:
    return f'<h2 style="font-size:17px;margin:22px 0 8px;color:#135">{_e(title)}</h2>'


def _para(text: str, style: str = "") -> str:
    return f'<p style="margin:0 0 10px;white-space:pre-wrap;{style}">{_e(text)}</p>'


def _img(path: Path | str | None, alt: str, caption: str) -> str:
    if not path or not Path(path).is_file():
        return f'<p style="color:#888;font-size:13px">{_e(caption)} : indisponible</p>'
    return (f'<img src="cid:{_e(content_id(Path(path).name))}" alt="{_e(alt)}" style="display:block;width:100%;'
            f'max-width:100%;height:auto;border:1px solid #ccc">'
            f'<div style="font-size:12px;color:#666;padding-top:2px">{_e(caption)}</div>')


def _route_rows(route: dict[str, Any]) -> str:
    page, declared = checked_page(route)
    ok = route["status"] == QaCheckStatus.PASSED
    name = f"<strong>{_e(page)}</strong>" + (
        f'<br><span style="font-size:13px;color:#666">déclarée : {_e(declared)}</span>' if declared else "")
    why = "".join(f'<br><span style="font-size:13px">{_e(f)}</span>' for f in ([] if ok else figures(route)))
    verdict = f'<span style="color:{"#17702e" if ok else "#b00020"};font-weight:bold">' \
              f'{"OK" if ok else "ÉCHEC"}</span>{why}'
    row = f'<tr><td style="{_CELL}">{name}</td><td style="{_CELL}">{verdict}</td></tr>'
    shots = [(route.get("screenshot"), f"Capture de {page}", "Capture")]
    if route.get("diff_image"):
        shots.append((route["diff_image"], f"Écart avec la maquette, {page}", "Écart avec la maquette"))
    cells = "".join(f'<td style="padding:4px;vertical-align:top;width:{100 // len(shots)}%">{_img(*s)}</td>'
                    for s in shots if s[0])
    if not cells:
        return row
    return row + (f'<tr><td colspan="2" style="padding:4px 0 14px;border-bottom:1px solid #e3e3e3">'
                  f'<table role="presentation" style="width:100%;border-collapse:collapse"><tr>{cells}</tr>'
                  f'</table></td></tr>')


def _routes(qa: dict[str, Any]) -> str:
    head = (f'<tr><th style="{_CELL};font-size:13px;color:#555">Page vérifiée</th>'
            f'<th style="{_CELL};font-size:13px;color:#555;width:35%">Verdict</th></tr>')
    return (_h2(f"Vérification en préproduction ({qa.get('target')}, itération {qa.get('iteration')})")
            + '<table role="presentation" style="width:100%;border-collapse:collapse;font-size:15px">'
            + head + "".join(_route_rows(r) for r in qa["routes"]) + "</table>")


def page(facts: dict[str, Any], draft: str, summary: str, commits: Sequence[str]) -> str:
    """The recap's HTML part."""
    qa = facts["qa"]
    parts = [f'<h1 style="font-size:20px;margin:0 0 6px">{_e(facts["subject"] or "(sans objet)")}</h1>',
             f'<p style="margin:0 0 12px;color:#555;font-size:14px">De {_e(facts["envelope_from"] or "?")}'
             f' · {_e(facts["intent"])}/{_e(facts["complexity"])}</p>']
    if facts.get("cover"):
        parts.append('<blockquote style="margin:0 0 12px;padding:8px 12px;border-left:3px solid #ccc;color:#444;'
                     f'white-space:pre-wrap">{_e(facts["cover"])}</blockquote>')
    parts += [_h2("Ce que l'agent a fait"), _para(summary)]
    if commits:
        parts.append('<p style="margin:0 0 10px">Commits : '
                     + ", ".join(f"<code>{_e(c)}</code>" for c in commits) + "</p>")
    if learnt := lesson_lines(facts):
        parts += [_h2(LESSONS_TITLE), "".join(_para(line, "font-size:14px") for line in learnt)]
    if facts.get("changes"):
        parts.append(_changes(facts["changes"]))
    parts.append(_routes(qa) if qa["routes"] else _para(NOTHING_DEPLOYED))
    parts.append(_para(f"Coût : {float(facts['cost']):.2f} USD ({facts['launches']} lancement(s))",
                       "color:#555;font-size:14px;margin-top:16px"))
    parts.append('<div style="margin:24px 0 0;padding:4px 14px 10px;background:#f5f3ea;border:1px solid #e0dcc8;'
                 f'border-radius:6px">{_h2(DRAFT_TITLE)}{_para(draft)}</div>')
    return ('<!doctype html><html lang="fr"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1"><title>Atlas</title></head>'
            f'<body style="margin:0;padding:12px;background:#fff;color:#222;{_FONT};font-size:16px;'
            f'line-height:1.45"><div style="max-width:640px;margin:0 auto;overflow-wrap:anywhere">'
            f'{"".join(parts)}</div></body></html>')
