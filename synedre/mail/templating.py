"""Every mail's words and layout are templates (synedre/mail/templates/): `NAME.txt` and
`NAME.html` side by side, filled from plain data (dicts of strings, numbers and lists).

One Jinja2 environment for all of them: the HTML templates autoescape every value (a
subject, a client's words, an agent's summary hold no live markup), the text ones do not
(the text part says a string as it is); an undefined name fails loudly rather than
leaving a blank. A value is only ever data: template syntax inside it is not evaluated.
Files whose name starts with `_` are shared pieces (the layout, macros), not mails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

TEMPLATES = "templates"  # beside this module; shipped as package data (pyproject.toml)

_env = Environment(loader=PackageLoader("synedre.mail", TEMPLATES), autoescape=select_autoescape(["html"]),
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


@dataclass(frozen=True)
class Rendered:
    text: str
    html: str


def mail(name: str, data: dict[str, Any]) -> Rendered:
    """The text and HTML parts of mail `name` filled with `data`."""
    return Rendered(_env.get_template(f"{name}.txt").render(data), _env.get_template(f"{name}.html").render(data))
