"""The mailboxes: a poll by hand (`synedre poll`), an OAuth2 mailbox's authorization
(`synedre mailbox authorize`), and the IDLE watcher the fleet runs (`synedre idle`)."""
from __future__ import annotations

import threading
from typing import Any, Literal

import typer

from synedre.cli.common import DEPENDENCY, USAGE, Unavailable, console, fail, need_database, sub_app
from synedre.config import get_settings

app = sub_app("The mailboxes of the registry (SYNEDRE_MAILBOXES_FILE).")


def poll(mailbox: str = typer.Argument("atlas", help="The mailbox's id in the registry (SYNEDRE_MAILBOXES_FILE)"),
         wait: bool = typer.Option(False, help="Run here and now instead of enqueueing")) -> None:
    """Ask for a poll of a mailbox (the same task beat and IDLE trigger)."""
    from imapclient.exceptions import IMAPClientError

    from synedre import mailboxes
    from synedre.mailboxes import RegistryError
    from synedre.oauth import TokenUnavailable

    try:
        box = mailboxes.get(mailbox)  # an unknown mailbox is refused here, not in a worker
    except RegistryError as exc:
        fail(str(exc), USAGE)
    if not wait:
        from tasks.app import app as celery
        console.print(f"enqueued {celery.send_task('synedre.poll', args=[mailbox]).id}")
        return
    import logging

    from tasks.poll import poll as poll_task

    need_database()
    if get_settings().log_level != "DEBUG":  # the failure is said once below, not as the task's traceback
        logging.getLogger("celery.app.trace").setLevel(logging.CRITICAL)
    try:  # one attempt, here and now: a worker's retries are the worker's
        result = poll_task.apply(args=[mailbox], retries=poll_task.max_retries).get()
    except TokenUnavailable as exc:
        raise Unavailable(f"mailbox {mailbox}: {exc}: check the network and the provider's status") from exc
    except (OSError, IMAPClientError) as exc:
        raise Unavailable(f"IMAP of mailbox {mailbox} ({box.imap_host}:{box.imap_port}) did not answer"
                          f" ({type(exc).__name__}: {' '.join(str(exc).split())}): check the server, and the"
                          " mailbox's entry in SYNEDRE_MAILBOXES_FILE") from exc
    if "login_refused" in result:  # it answered, and said no
        fail(result["login_refused"], DEPENDENCY)
    console.print_json(data=result)


@app.command("authorize")
def mailbox_authorize(
    mailbox: str = typer.Argument(..., help="The mailbox's id in the registry"),
    flow: Literal["device", "code"] | None = typer.Option(
        None, "--flow", help="device: a code to enter on the provider's page (Microsoft's default); code: an"
                             " address to open, the browser's answer pasted back (Google's default)"),
) -> None:
    """Obtain the OAuth2 refresh token of an `auth = "oauth2"` mailbox and store it (mode 0600) in
    the file its refresh_token_file names; then log in with it. Works on a headless server. For
    Microsoft 365 app-only access (app_only = true) there is none to store: it checks the grant."""
    from synedre import mailboxes, oauth

    try:
        box = mailboxes.get(mailbox)
    except mailboxes.RegistryError as exc:
        fail(str(exc), USAGE)
    cfg = box.oauth2
    if cfg is None:
        fail(f"mailbox {mailbox} logs in with a password (password_env): there is nothing to authorize", USAGE)
    if not cfg.app_only and cfg.refresh_token_file is None:
        fail(f"mailbox {mailbox}: name a refresh_token_file in [mailboxes.{mailbox}.oauth2]: the token is stored"
             " there (a variable cannot be written)", USAGE)
    try:
        if cfg.app_only:
            box.access_token(fresh=True)
            console.print(f"app-only access: the token endpoint granted a token for {box.username};"
                          " there is no refresh token to store")
        else:
            assert cfg.refresh_token_file is not None
            token = _authorize_flow(box, cfg, flow or _default_flow(cfg))
            if not token.get("refresh_token"):
                fail(f"mailbox {mailbox}: the provider gave no refresh token (ask for offline access:"
                     " Microsoft's offline_access scope)")
            oauth.store_refresh_token(cfg.refresh_token_file, str(token["refresh_token"]))
            console.print(f"refresh token stored in {cfg.refresh_token_file} (mode 0600)")
    except oauth.AuthorizeError as exc:
        fail(f"mailbox {mailbox}: {exc}")
    except oauth.TokenRefused as exc:
        fail(f"mailbox {mailbox}: {exc}")
    except oauth.TokenUnavailable as exc:
        fail(f"mailbox {mailbox}: {exc}", DEPENDENCY)
    except oauth.SecretMissing as exc:
        fail(f"mailbox {mailbox}: {exc}", USAGE)
    with box.session() as client:  # LoginRefused: one line and exit 3, through the one error path
        client.select_folder(box.folder, readonly=True)
    console.print(f"{box.imap_server}: login as {box.username} ok (XOAUTH2)")


def _default_flow(cfg: Any) -> Literal["device", "code"]:
    if cfg.provider == "google":
        return "code"  # Google's device flow does not grant the mail scope
    return "device" if cfg.endpoints().device_authorization_url else "code"


def _authorize_flow(box: Any, cfg: Any, flow: Literal["device", "code"]) -> dict[str, Any]:
    from synedre import oauth

    if flow == "device":
        code = oauth.start_device(cfg)
        console.print(f"To let Synedre use mailbox {box.id}, open {code.verification_uri} in a browser, sign in"
                      f" as {box.username} and enter the code {code.user_code}"
                      f" (within {code.expires_in / 60:.0f} min). Waiting…")
        return oauth.poll_device(cfg, code)
    request = oauth.authorization_request(cfg)
    console.print(f"Open this address in a browser, sign in as {box.username} and allow access:", soft_wrap=True)
    console.print(request.url, soft_wrap=True, markup=False, highlight=False)
    console.print(f"The browser then fails to load {oauth.PASTE_REDIRECT_URI}…: copy that whole address from its"
                  " address bar and paste it here (the code alone will do).", soft_wrap=True)
    return oauth.exchange_code(cfg, request, typer.prompt("address", prompt_suffix=": "))


def idle() -> None:
    """Watch every registered mailbox with IMAP IDLE and trigger polls (run by the fleet)."""
    import signal

    from synedre import mailboxes
    from synedre.ingest.idle import watch_all
    from tasks.app import app as celery

    try:
        boxes = list(mailboxes.load().values())
    except mailboxes.RegistryError as exc:
        fail(str(exc), USAGE)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    expires = get_settings().poll_interval_s
    failed = watch_all(boxes, lambda box: celery.send_task("synedre.poll", args=[box], expires=expires), stop)
    if failed and not stop.is_set():
        # Every watcher has given up (a server without IDLE; a refused login is retried in
        # place after the mailbox backoff): exit so the fleet restarts us after its own.
        fail(f"IDLE watcher stopped for {', '.join(failed)}; see the idle_failed log lines", DEPENDENCY)
