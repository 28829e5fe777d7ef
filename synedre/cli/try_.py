"""`synedre try`: the try-out on this machine (`make try`), delivering mail to it, and the
founder's inbox it keeps."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from synedre.cli.approvals import decide
from synedre.cli.common import DEPENDENCY, USAGE, console, err, fail, sub_app
from synedre.cli.fleet import claim_state_dir, run_fleet
from synedre.config import Settings, get_settings

app = sub_app("A try-out on this machine (`make try`): a local mailbox for Atlas, a mail sink for the founder,"
              " an example client with its pre-production site, and the fleet; only the LLM keys are yours.")

# The keys a try-out needs, and what each one is for.
TRY_KEYS = {"SYNEDRE_MISTRAL_API_KEY": "the classifier", "SYNEDRE_ANTHROPIC_API_KEY": "the agent"}


def _missing_keys(s: Settings) -> list[str]:
    return [var for var in TRY_KEYS if s.resolve_key(var.split("_")[1].lower())[0] is None]


def _keys_line(missing: list[str]) -> str:
    """One line naming every key the try-out lacks, and what waits meanwhile."""
    return (f"no LLM key: set {' and '.join(f'{v} ({TRY_KEYS[v]})' for v in missing)}, then start `make try`"
            " again; until then a request waits in classify saying which key it lacks (`synedre inspect --all`),"
            " then ends classify_failed (`synedre retry` sends it back)")


@app.command("run")
def try_run(grace: float = typer.Option(30.0, help="Seconds running tasks get to finish on stop")) -> None:
    """Start the try-out's mailbox, mail sink, example client and clamd under the state directory,
    then the fleet (what `make try` runs); Ctrl-C stops everything."""
    from synedre import tryout

    s = get_settings()
    claim = claim_state_dir(s)  # one fleet per state directory, a try-out's included
    if missing := _missing_keys(s):
        err.print(f"[bold yellow]warning:[/] {escape(_keys_line(missing))}", soft_wrap=True)
    try:
        running = tryout.start(s.state_dir, missing)
    except (tryout.dovecot.DovecotError, OSError) as exc:
        fail(f"the try-out could not start: {exc}", DEPENDENCY)
    try:
        os.environ.update(running.env)  # the fleet's children inherit it
        get_settings.cache_clear()
        code = run_fleet(get_settings(), grace, ready=lambda: _try_ready(running))
    finally:
        running.stop()
    claim.close()
    raise typer.Exit(code)


def _try_ready(running: Any) -> None:
    """The try-out's directory imported (again: its ports may have changed), and what runs where."""
    from synedre import db, tryout
    from synedre.db.directory import import_directory, parse_file

    where = running.layout
    with db.transaction() as conn:
        import_directory(conn, parse_file(where.directory.read_bytes()))
    scan = (f"clamd on {running.clamd.address}, {running.clamd.database}" if running.clamd else
            f"no clamd ({running.clamd_error}): every message with an attachment will be blocked")
    console.print(
        f"try-out in {where.root}:\n"
        f"  Atlas's mailbox   IMAP 127.0.0.1:{running.mailbox.port} (Dovecot; {where.mailboxes})\n"
        f"  founder's inbox   {where.sink} (`synedre try inbox`)\n"
        f"  example client    {tryout.CLIENT} in {where.repo}, pre-production {running.preprod_url}\n"
        f"  scanner           {scan}\n"
        f"send the sample request from another terminal: .venv/bin/synedre try send", soft_wrap=True)


@app.command("send")
def try_send(file: Annotated[Path | None, typer.Argument(
        help="An email (.eml) to deliver; by default the shipped sample, a forwarded request")] = None) -> None:
    """Deliver an email to the try-out's Atlas mailbox (by default the shipped sample request)."""
    from imapclient.exceptions import IMAPClientError

    from synedre import tryout

    s = get_settings()
    try:
        raw = file.read_bytes() if file is not None else tryout.sample_request()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", USAGE)
    try:
        tryout.deliver(s.state_dir, raw)
    except FileNotFoundError as exc:
        fail(str(exc), DEPENDENCY)
    except (OSError, IMAPClientError) as exc:
        fail(f"the try-out's mailbox did not take it ({type(exc).__name__}: {exc}): is `make try` running?",
             DEPENDENCY)
    console.print(f"delivered {file or 'the sample request'} to Atlas's inbox: `synedre inspect --all` follows it;"
                  " the founder's mail lands in `synedre try inbox`", soft_wrap=True)
    if missing := tryout.layout(s.state_dir).saved().get("missing_keys"):  # the try-out's, not this terminal's
        err.print(f"[bold yellow]warning:[/] {escape(_keys_line(missing))}", soft_wrap=True)


@app.command("inbox")
def try_inbox(number: Annotated[int | None, typer.Argument(help="A mail's number: show it (text, images)")] = None,
              approve: bool = typer.Option(False, "--approve",
                                           help="With an approval request's NUMBER: give the founder's OK"
                                                " (as `synedre approve`)")) -> None:
    """The founder's mail from the try-out (recaps, alerts, approval requests), one line each;
    with NUMBER, that mail's text, its images saved beside it."""
    from synedre import tryout
    from synedre.tryout import sink

    folder = tryout.layout(get_settings().state_dir).sink
    mails = {m.number: m for m in sink.read(folder)}
    if number is None:
        if approve:
            fail("--approve needs the NUMBER of an approval request", USAGE)
        if not mails:
            console.print(f"no mail yet in {folder}")
        for m in mails.values():
            console.print(f"{m.number:4d}  {m.message['Date'] or ''}  {m.kind:<10} message {m.about or '-':<5}"
                          f" {escape(str(m.message['Subject'] or ''))}", soft_wrap=True)
            if m.kind.startswith("approval") and m.kind != "approval-expired":
                console.print(f"      to approve: synedre try inbox {m.number} --approve")
        return
    mail = mails.get(number)
    if mail is None:
        fail(f"no mail {number} in {folder} ({len(mails)} there)")
    if approve:
        if not mail.kind.startswith("approval") or mail.kind == "approval-expired" or mail.about is None:
            fail(f"mail {number} is a {mail.kind}, not an approval request")
        return decide(str(mail.about), approve=True, reason=None)
    for header in ("From", "To", "Date", "Subject"):
        console.print(f"{header}: {escape(str(mail.message[header] or ''))}", soft_wrap=True)
    console.print()
    console.print(escape(mail.text().rstrip()), soft_wrap=True)
    images = mail.images()
    if images:
        beside = folder / f"{number:04d}"
        beside.mkdir(exist_ok=True)
        for name, data in images:
            (beside / Path(name).name).write_bytes(data)
        console.print(f"\nimages: {', '.join(str(beside / Path(n).name) for n, _ in images)}", soft_wrap=True)
