"""Help an operator can act on (issue 19, item 8): no internal references, every argument and
option described, the accepted values of an option listed, no type shown on a flag."""
from __future__ import annotations

import re

from typer.main import get_command
from typer.testing import CliRunner

from synedre.cli import app
from synedre.cli.messages import RETRY_STAGES
from synedre.pipeline import Status


def commands(cmd=None, path=("synedre",)):
    cmd = cmd or get_command(app)
    subs = getattr(cmd, "commands", None)
    if not subs:
        yield path, cmd
        return
    yield path, cmd
    for name, sub in subs.items():
        yield from commands(sub, (*path, name))


def test_every_help_is_free_of_internal_references_and_describes_every_parameter():
    for path, cmd in commands():
        text = CliRunner().invoke(app, [*path[1:], "--help"]).stdout
        assert text.startswith("Usage:"), (path, text)
        assert not re.search(r"SPEC|§|Phase \d|<bool>", text), (path, text)
        for param in getattr(cmd, "params", []):
            assert param.help, (path, param.name)  # arguments included


def test_the_accepted_values_of_an_option_are_listed():
    retry = " ".join(CliRunner().invoke(app, ["retry", "--help"]).stdout.split())
    assert f"Stage to re-run: {', '.join(RETRY_STAGES)}" in retry
    assert "<" + "|".join(Status) + ">" in retry
    ask = CliRunner().invoke(app, ["agent", "ask", "--help"]).stdout
    assert "--via <facade|claude>" in ask
