"""The README stays true of the code: every setting documented, every CLI command shown."""
import re
from pathlib import Path

from typer.main import get_command

from synedre.cli import app
from synedre.config import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_setting_is_documented():
    names = [str(f.validation_alias or f"SYNEDRE_{name.upper()}") for name, f in Settings.model_fields.items()]
    missing = [n for n in names if f"`{n}`" not in README and f"{n}`" not in README]
    assert missing == []


def test_every_cli_command_appears_in_the_operator_section():
    cli = get_command(app)
    names = []
    for name, cmd in cli.commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None)
        names += [f"synedre {name} {sub}" for sub in subs] if subs else [f"synedre {name}"]
    missing = [n for n in names if not re.search(re.escape(n) + r"\b", README)]
    assert missing == []


def test_the_readme_points_at_files_that_exist():
    root = Path(__file__).resolve().parents[1]
    for path in re.findall(r"`((?:synedre|tasks|bench|scripts|migrations|prompts|compose|docs)/[\w./-]+)`", README):
        assert (root / path).exists(), path


def test_the_settings_table_gives_each_default_the_code_has():
    """Each literal default of the Configuration table (`60`, `console`, 1200 / 6600 …) is the
    field's default in synedre/config.py; descriptions (`<state dir>/…`, none, 25 MiB) are skipped."""
    fields = {str(f.validation_alias or f"SYNEDRE_{n.upper()}"): f.default for n, f in Settings.model_fields.items()}
    table = README[README.index("## Configuration"):README.index("## Operator commands")]
    checked = []
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        names_cell, defaults_cell = [c.strip() for c in line.strip("|").split("|")][:2]
        names, defaults = re.findall(r"`([A-Z_]+)`", names_cell), [d.strip() for d in defaults_cell.split(" / ")]
        for name, said in zip(names, defaults, strict=False) if len(names) == len(defaults) else ():
            literal = re.fullmatch(r"`([^`<]*)`|(\d+(?:\.\d+)?)", said)
            if literal is None:
                continue
            text, code = literal.group(1) or literal.group(2), fields[name]
            same = str(code).lower() == text.lower() if isinstance(code, bool | str) else float(text) == code
            assert same, (name, said, code)
            checked.append(name)
    assert len(checked) >= 35, checked  # the table was read, not skipped
