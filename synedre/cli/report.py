"""`synedre report`: the classifier's calibration report."""
from __future__ import annotations

import json
import sys

import typer

from synedre.cli.common import need_database, sub_app

app = sub_app("Reports.")


@app.command("calibration")
def report_calibration(days: int = typer.Option(30, min=1, help="Window, in days"),
                       as_json: bool = typer.Option(False, "--json", help="Machine-readable output")) -> None:
    """The classifier's calibration report (markdown): per intent, counts, confidence, success of
    the launched work, and the autonomy gate (over 90 % success on at least 30 run and plan
    items launched; refused and expired approvals counted apart as its failures)."""
    from synedre import db
    from synedre.report.calibration import as_dict, collect, render

    need_database()
    with db.transaction() as conn:
        data = collect(conn, days=days)
    sys.stdout.write((json.dumps(as_dict(data), ensure_ascii=False, indent=1) if as_json else render(data)) + "\n")
