"""What the founder reads in a recap or an alert (SPEC §9.6–9.8), as pure functions of the
facts the recap stage gathered (`orchestrate.iterations.summary` per route).

Each route is named by the page checked (the sitemap's path QA resolved it to), with the
declared route beside it when they differ; a failed route says why with its figure (the
HTTP status, the share of pixels unlike the mock-up against the threshold, the browser's
error). The HTML part is a layout for a phone: one column at most 640 px wide, a table of
routes and verdicts, each screenshot inline under its route (`cid:`, the Content-ID
`outbound.content_id` gives the attached file) with the mock-up diff beside it, and the
draft reply set apart. Every string that came from outside (subject, sender, the client's
words, the agent's summary, commits, reasons, the draft) is escaped: the HTML holds no
markup but ours. Inline styles only: mail clients drop `<style>` and scripts.
"""
from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from synedre.mail.outbound import content_id
from synedre.pipeline import QaCheckStatus

NOTHING_DEPLOYED = "Rien n'a été déployé (pas de code à vérifier)."
DRAFT_TITLE = "Brouillon de réponse, à envoyer vous-même"
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
    """(the page QA checked, the declared route when it differs, else None)."""
    declared, resolved = route["route"], route.get("resolved")
    if resolved and resolved != declared:
        return resolved, declared
    return declared, None


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
