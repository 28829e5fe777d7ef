"""Every mail template (synedre/mail/templates/), text and HTML, filled with hostile strings
in every field: the HTML part holds no live markup (no script, no event handler, no
`javascript:` link, no image but our own `cid:` ones), the text part says each string as it
is, and template syntax inside a value is never evaluated.

The templates folder is read, not listed here: a new mail without a sample below fails
`test_every_mail_template_has_its_pair_and_a_sample`."""
from __future__ import annotations

from datetime import UTC, datetime
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest

from synedre.mail import recap_view, templating
from synedre.pipeline import Status
from synedre.stages import approval

pytestmark = pytest.mark.unit

TEMPLATES = Path(templating.__file__).with_name(templating.TEMPLATES)
# Starts with `javascript:` so that a link or image field printed as-is would be a live link.
TEMPLATE_SYNTAX = ("{{ 7*7 }}", "{% if true %}evaluated{% endif %}", "{# gone #}")
HOSTILE = ('javascript:alert(1)//<script>alert(1)</script>"><img src=x onerror=alert(1)></style><style>'
           + "".join(TEMPLATE_SYNTAX))


def poison(value: Any) -> Any:
    """`value` with every string in it, however deep, replaced by the hostile one."""
    if isinstance(value, str):
        return HOSTILE
    if isinstance(value, dict):
        return {k: poison(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [poison(v) for v in value]
    return value


def change(n_files: int = 2) -> dict[str, Any]:
    files = [{"path": f"site/f{i}.html", "added": i, "removed": 1} for i in range(n_files)]
    return {"branch": "synedre/msg-7-a1", "launch_id": 3, "iteration": 1, "commits": [("1a2b3c4d5e6f7788", "contact")],
            "files": [*files, {"path": "logo.png", "added": None, "removed": None}], "patch": b"diff",
            "patch_bytes": 9999, "left_out": ["a.txt"], "has_binary": True, "altered": True, "base_sha": "abcdef012345"}


def facts(tmp: Path, **kw: Any) -> dict[str, Any]:
    shot, diff = tmp / "shot.png", tmp / "diff.png"
    for p in (shot, diff):
        p.write_bytes(b"\x89PNG")
    routes = [{"route": "/", "routes": ["/", "/accueil"], "resolved": "/", "status": "failed",
               "reasons": ["http_status", "iso_mismatch", "console_error"], "http_status": 500,
               "screenshot": str(shot), "diff_image": str(diff),
               "detail": {"iso": {"mismatch_ratio": 0.2, "threshold": 0.05}, "console_errors": ["boom"]}},
              {"route": "/c", "routes": ["/c"], "resolved": "/c", "status": "passed", "reasons": [],
               "http_status": 200, "screenshot": str(tmp / "missing.png"), "diff_image": None, "detail": {}}]
    contract = SimpleNamespace(summary_md="fait", commits=["abc"], lessons_applied=[7])
    return {"subject": "Devis", "envelope_from": "client@x.fr", "intent": "run", "complexity": "leger",
            "status": Status.ACTIONED, "cost": 1.5, "launches": 2, "contract": contract, "cover": "Bonjour",
            "launch": {"stop_reason": "turn_cap", "branch": "b", "salvage": {"branch": "s", "commits": ["c1"],
                                                                          "resumable": True, "contract": {"k": 1},
                                                                          "merge": "conflict"}},
            "qa": {"deployed": False, "target": "preprod", "iteration": 2, "deploy_log": "a\nb",
                   "deploy_exit_code": 3, "routes": routes},
            "changes": [change(), change(70)], "lessons": [{"id": 7, "title": "t", "body": "b"}], **kw}


def approval_row(gate: str, **kw: Any) -> dict[str, Any]:
    launch = {"rule": "big_cost", "why": "cost", "client": "acme", "intent": "run", "complexity": "plan",
              "confidence": 0.8, "model": "opus", "tools": ["Bash"], "estimated_usd": 3.5}
    deploy = {"rule": "touches_deploy", "why": "deploy", "client": "acme", "target": "preprod",
              "paths": ["deploy"], "baseline": "0123456789abcdef", "head": "fedcba9876543210", "diff": "+echo"}
    return {"message_id": 7, "token": "ab12cd34ef56", "rule": "big_cost", "subject": "Sujet", "gate": gate,
            "expires_at": datetime(2026, 3, 4, 5, 6, tzinfo=UTC), "launch_id": 5,
            "facts": launch if gate == "launch" else deploy, **kw}


def samples(tmp: Path) -> dict[str, list[dict[str, Any]]]:
    """Each mail's data as production builds it, one per branch of its template."""
    f = facts(tmp)
    return {
        "recap": [recap_view.recap(f, "Brouillon", "fait", ["abc"]),
                  recap_view.recap(facts(tmp, qa={"deployed": False, "routes": []}, changes=[], lessons=[],
                                         cover=""), "Brouillon", "fait", [])],
        "alert": [recap_view.alert(facts(tmp, status=Status.SPAWN_FAILED), ["e1", "e2"], 2, 3, True),
                  recap_view.alert(facts(tmp, status=Status.MERGE_FAILED,
                                         qa={**f["qa"], "iteration": 1, "deploy_log": ""}), ["e"], 3, 3, False)],
        "approval": [approval.request(approval_row("launch"), "Bonjour")[2],
                     approval.request(approval_row("launch", follows_message_id=3, previous=[change()]), "x")[2],
                     approval.request(approval_row("launch", follows_message_id=3, previous=[]), "")[2]],
        "approval-deploy": [approval.request(approval_row("deploy"), "")[2]],
        "approval-expired": [approval.expired(approval_row("launch"))],
        "calibration": [{"report": "# Classification calibration\n\n| intent | count |\n|---|---:|\n"}],
    }


def mail_names() -> set[str]:
    return {p.stem for p in TEMPLATES.iterdir() if p.suffix in (".txt", ".html") and not p.name.startswith("_")}


def test_every_mail_template_has_its_pair_and_a_sample(tmp_path):
    names = mail_names()
    assert names, TEMPLATES
    for name in names:
        assert (TEMPLATES / f"{name}.txt").is_file() and (TEMPLATES / f"{name}.html").is_file(), name
    assert set(samples(tmp_path)) == names  # a template without a sample here is a mail nobody tried to break


class Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[tuple[str, str]] = []
        self.links: list[tuple[str, str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.handlers += [(tag, k) for k, _ in attrs if k.lower().startswith("on")]
        self.links += [(tag, k, (v or "").strip().lower()) for k, v in attrs if k in ("src", "href", "action")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.mark.parametrize("name", sorted(mail_names()))
def test_a_hostile_string_in_every_field_is_shown_as_text_never_as_markup(name, tmp_path):
    for i, data in enumerate(samples(tmp_path)[name]):
        mail = templating.mail(name, poison(data))
        found = Markup()
        found.feed(mail.html)
        found.close()
        where = f"{name} sample {i}"
        assert "<script" not in mail.html.lower(), where
        assert {"script", "style", "iframe", "object", "embed", "form"}.isdisjoint(found.tags), (where, found.tags)
        assert found.handlers == [], (where, found.handlers)
        assert all(not url.startswith("javascript:") for _, _, url in found.links), (where, found.links)
        assert all(tag == "img" and url.startswith("cid:") for tag, _, url in found.links), (where, found.links)
        shown = "".join(found.text)
        assert HOSTILE in shown, where  # the founder reads what was written, escaped once
        assert HOSTILE in mail.text, where  # the text part says it as it is
        for syntax in TEMPLATE_SYNTAX:  # data is never a template
            assert syntax in shown and syntax in mail.text, (where, syntax)
        assert "evaluated" not in unescape(mail.html).replace(HOSTILE, "")


@pytest.mark.parametrize("name", sorted(mail_names()))
def test_a_missing_field_fails_loudly_rather_than_leaving_a_blank(name, tmp_path):
    """Every field a sample gives is one its template uses (in some branch), and one left out
    is an error, not an empty string in the founder's mail."""
    def fails_without(data: dict[str, Any], key: str) -> bool:
        try:
            templating.mail(name, {k: v for k, v in data.items() if k != key})
        except jinja2.UndefinedError:
            return True
        return False

    given = samples(tmp_path)[name]
    for key in {k for data in given for k in data}:
        assert any(fails_without(data, key) for data in given if key in data), key


def test_a_screenshot_is_shown_inline_by_the_content_id_of_its_attached_file(tmp_path):
    mail = templating.mail("recap", samples(tmp_path)["recap"][0])
    found = Markup()
    found.feed(mail.html)
    assert [url for _, _, url in found.links] == ["cid:shot.png@atlas.synedre.invalid",
                                                 "cid:diff.png@atlas.synedre.invalid"]
    assert "Capture : indisponible" in mail.html  # the second page's screenshot is missing
