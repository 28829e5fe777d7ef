"""A mailbox that logs in with OAuth2 (XOAUTH2), end to end on real servers: a Dovecot whose
`oauth2` passdb asks a scripted OAuth server (RFC 6749 token endpoint, RFC 7662
introspection) about every token, aiosmtpd taking AUTH XOAUTH2 against the same server, and
the fleet, its IDLE watcher and its recap worker, as `synedre fleet` runs them. Every token
the OAuth server ever issued, and the client secret, are then looked for in the logs, a dump
of the database and every command line seen on the machine: none may be there."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import psycopg
import pytest

from tests.conftest import CORPUS
from tests.services import stack
from tests.services.leaks import CommandLines, assert_absent, pg_dump

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MESSAGE = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()


def events(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT message_id, event FROM synedre.audit_log ORDER BY id").fetchall()


def inserted(url: str) -> list[int]:
    return [m for m, e in events(url) if e == "poll_inserted"]


def deliver(dovecot, tag: str) -> None:
    raw = MESSAGE.replace(b"Message-ID: <", f"Message-ID: <{tag}.".encode(), 1)
    with dovecot.client() as c:  # the test's own delivery, as an MTA would: not the fleet's login
        c.append("INBOX", raw)


def start_fleet(box) -> stack.Proc:
    return stack.Proc("fleet", [sys.executable, "-m", "synedre.cli", "fleet", "--grace", "20"], box["env"],
                      box["logs"])


def stop(proc: stack.Proc) -> None:
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.stop(signal.SIGINT, timeout=60)
    for c in children:
        try:
            c.kill()
        except psutil.NoSuchProcess:
            pass


def logs_text(box) -> str:
    files = [*box["logs"].glob("*.log"), box["dovecot"].log_path]
    return "\n".join(f.read_text(errors="replace") for f in files if f.exists())


def assert_no_secret_anywhere(box, cmdlines: CommandLines) -> None:
    """Acceptance item 7: no token nor secret in the logs, a dump of the schema, a command line."""
    assert cmdlines.samples >= 5
    assert_absent(box["oauth"].issued(), logs=logs_text(box), schema_dump=pg_dump(box["db"]),
                  command_lines=cmdlines.text())


def test_the_fleet_ingests_through_idle_and_recaps_by_smtp_xoauth2_with_tokens_from_the_refresh_token(oauth_box):
    box, oauth, url = oauth_box, oauth_box["oauth"], oauth_box["db"]
    subprocess.run([sys.executable, "-m", "synedre.cli", "directory", "import", str(CORPUS / "directory.json")],
                   env=box["env"], check=True, timeout=60, cwd=stack.ROOT, capture_output=True)
    with CommandLines() as cmdlines:
        fleet = start_fleet(box)
        try:
            fleet.wait_output("idle_watching", timeout=90)
            assert oauth.count("refresh_token") >= 1  # the watcher's token came from the refresh token
            deliver(box["dovecot"], "oauth-e2e")
            mid = stack.wait_for(lambda: inserted(url), 30, "the IDLE-triggered poll to store the mail")[0]
            # Dovecot let the fleet in only on tokens its introspection found live
            assert oauth.introspected and "method=XOAUTH2" in box["dovecot"].log_path.read_text()
            # the request is answered without code (a question): the recap is due
            # (no LLM here: it ends classify_failed, out of every stage's hands)
            stack.wait_for(lambda: status(url, mid) == "classify_failed", 60, "the understanding stages to end")
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("UPDATE synedre.email_states SET status = 'report_due', intent = 'question',"
                          " complexity = 'leger' WHERE message_id = %s", (mid,))
            from tasks.app import app
            app.send_task("synedre.recap", args=[mid])
            sent = box["smtp"].wait_for(1, timeout=60)
            assert stack.wait_for(lambda: status(url, mid) == "actioned", 30, "the recap's status")
        finally:
            stop(fleet)
    assert sent[0].login == "atlas" and sent[0].rcpt_tos == ("julien@atelier-moreau.fr",)
    assert box["smtp"].logins == [("atlas", True)]  # AUTH XOAUTH2 with a live token, first time
    assert "[Atlas]" in sent[0].message["Subject"]
    assert "Traceback" not in fleet.output()
    assert_no_secret_anywhere(box, cmdlines)


def status(url: str, mid: int) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT status FROM synedre.email_states WHERE message_id = %s", (mid,)).fetchone()[0]


def wait_idle_connected(proc: stack.Proc, count: int, timeout: float = 30) -> None:
    stack.wait_for(lambda: proc.output().count("idle_watching") >= count, timeout,
                   f"IDLE connection number {count}", interval=0.05)


def test_a_session_ended_at_token_expiry_reconnects_with_a_new_token_and_the_next_mail_is_in_within_2_s(oauth_box):
    box, oauth, url = oauth_box, oauth_box["oauth"], oauth_box["db"]
    oauth.access_ttl_s = 4.0  # the watcher's token lives 4 s; it renews 2 s (half its life) before
    with CommandLines() as cmdlines:
        worker = stack.celery_worker(box["env"], box["logs"], queues="poll")
        watcher = stack.idle_watcher(box["env"], box["logs"])
        try:
            first = oauth.count("refresh_token")
            time.sleep(4.5)  # the token it logged in with has now expired
            box["dovecot"].kick()  # the server ends the session, as Outlook does at expiry
            kicked = time.monotonic()
            deliver(box["dovecot"], "after-expiry")
            stack.wait_for(lambda: inserted(url), 2.0, "the next mail, within 2 s of the session's end",
                           interval=0.02)
            took = time.monotonic() - kicked
            wait_idle_connected(watcher, 2)
        finally:
            watcher.stop()
            worker.stop()
    assert took < 2.0
    assert oauth.count("refresh_token") > first  # a new access token, from the refresh token
    assert "reconnected=True" in watcher.output() or '"reconnected": true' in watcher.output()
    assert "idle_login_refused" not in watcher.output()  # it never tried the expired one
    assert_no_secret_anywhere(box, cmdlines)


def cli(args: list[str], env: dict[str, str], timeout: float = 90, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synedre.cli", *args], env=env, cwd=stack.ROOT,
                          capture_output=True, text=True, timeout=timeout, **kw)


def refusals_logged(proc: stack.Proc) -> list[str]:
    return [line for line in proc.output().splitlines() if "idle_login_refused" in line]


def retry_delays(lines: list[str]) -> list[float]:
    import re
    return [float(re.search(r"retry_in_s=([\d.]+)", line).group(1)) for line in lines]  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_revoked_refresh_token_fails_loudly_backs_off_and_loses_no_mail_once_authorized_again(oauth_box):
    box, oauth, url = oauth_box, oauth_box["oauth"], oauth_box["db"]
    # the backoff's cap at 4 s (8 by default here would need a minute to show it holds)
    env = {**box["env"], "SYNEDRE_MAILBOX_BACKOFF_S": "1", "SYNEDRE_MAILBOX_BACKOFF_MAX_S": "4"}
    window_s = 30.0
    with CommandLines() as cmdlines:
        worker = stack.celery_worker(env, box["logs"], queues="poll")
        watcher = stack.idle_watcher(env, box["logs"])
        try:
            oauth.revoke_refresh()  # the user removed the app's access: its tokens die with it
            box["dovecot"].kick()
            started = time.monotonic()
            stack.wait_for(lambda: refusals_logged(watcher), 30, "the first refused attempt")
            deliver(box["dovecot"], "while-refused")  # arrives while the mailbox refuses the fleet

            # `synedre status`: FAIL naming the mailbox, the server and its answer, exit 3
            shown = cli(["status"], env)
            assert shown.returncode == 3, shown.stdout + shown.stderr
            line, = [x for x in shown.stdout.splitlines() if x.startswith("FAIL imap:atlas")]
            assert "refused the login of atlas: invalid_grant" in line and f"{oauth.url}/token" in line
            assert "synedre mailbox authorize atlas" in line
            assert "alerts and recaps to the founder leave from atlas: they cannot be sent" in line
            # the poll says refused, not "did not answer"
            polled = cli(["poll", "atlas", "--wait"], env)
            assert polled.returncode == 3 and "refused the login" in polled.stderr
            assert "did not answer" not in polled.stderr and len(polled.stderr.strip().splitlines()) == 1

            time.sleep(max(0.0, window_s - (time.monotonic() - started)))
            attempts = refusals_logged(watcher)
            refused_grants = oauth.refused.count("invalid_grant")

            # a new consent: `synedre mailbox authorize` through the device flow
            authorize = subprocess.Popen([sys.executable, "-m", "synedre.cli", "mailbox", "authorize", "atlas"],
                                         env=env, cwd=stack.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
            first_line = authorize.stdout.readline()  # type: ignore[union-attr]
            oauth.approve(first_line.split("enter the code ")[1].split()[0])
            out, errs = authorize.communicate(timeout=60)
            assert authorize.returncode == 0, first_line + out + errs
            authorized = time.monotonic()
            mid = stack.wait_for(lambda: inserted(url), 4 + 10, "the mail that waited, once authorized")[0]
            took = time.monotonic() - authorized
        finally:
            watcher.stop()
            worker.stop()
    # one line per attempt, each naming the mailbox, the token endpoint and its answer
    assert all("mailbox atlas" in a and "invalid_grant" in a and f"{oauth.url}/token" in a for a in attempts)
    # 1, 2, 4, 4, 4 … s: about nine attempts in 30 s, never the dozens of a restart loop
    assert 6 <= len(attempts) <= 10, retry_delays(attempts)
    delays = retry_delays(attempts)
    assert delays[:3] == [1, 2, 4] and set(delays[3:]) == {4}
    # the token endpoint, not Dovecot, was asked each time (the poll and status asked too)
    assert refused_grants >= len(attempts)
    assert status(url, mid) and took < 4 + 10
    assert "Traceback" not in watcher.output() + worker.output()
    from synedre import mailboxes
    assert mailboxes.refusals()[("atlas", "token")] >= len(attempts)
    from prometheus_client import generate_latest

    from synedre.metrics import registry
    scraped = generate_latest(registry()).decode()
    assert 'synedre_mailbox_login_failures_total{cause="token",mailbox="atlas"}' in scraped
    assert_no_secret_anywhere(box, cmdlines)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_wrong_password_is_said_in_one_line_by_the_fleet_and_the_poll_with_no_restart_loop(services):
    env = {**services["env"], "TEST_ATLAS_PASSWORD": "not-the-password", "SYNEDRE_POLL_INTERVAL_S": "3600",
           "SYNEDRE_MAILBOX_BACKOFF_S": "1", "SYNEDRE_MAILBOX_BACKOFF_MAX_S": "4"}
    polled = cli(["poll", "atlas", "--wait"], env)
    assert polled.returncode == 3, polled.stderr
    said, = polled.stderr.strip().splitlines()
    assert "mailbox atlas: IMAP 127.0.0.1:" in said and "refused the login of atlas:" in said
    assert "[AUTHENTICATIONFAILED] Authentication failed." in said and "did not answer" not in said
    assert "TEST_ATLAS_PASSWORD" in said and "not-the-password" not in said
    with CommandLines() as cmdlines:
        fleet = stack.Proc("fleet", [sys.executable, "-m", "synedre.cli", "fleet", "--grace", "20"], env,
                           services["logs"])
        try:
            stack.wait_for(lambda: "idle_login_refused" in fleet.output(), 90, "the watcher's first refusal")
            first = time.monotonic()
            time.sleep(8)
            out = fleet.output()
        finally:
            stop(fleet)
    # neither the wrong password nor the right one anywhere it must not be
    passwords = ["not-the-password", services["dovecot"].password]
    assert_absent(passwords, logs=out + polled.stdout + polled.stderr, schema_dump=pg_dump(services["db"]),
                  command_lines=cmdlines.text())
    start_lines = [x for x in out.splitlines() if "imap:atlas" in x]
    assert len(start_lines) == 1 and "refused the login of atlas" in start_lines[0], start_lines
    assert "fleet_child_exited" not in out  # the watcher stays up: no restart loop at all
    attempts = [x for x in out.splitlines() if "idle_login_refused" in x]
    # 1, 2, 4 s (Dovecot's own delay on a refusal only spaces them more): at most 4 in 8 s
    assert 2 <= len(attempts) <= 4, attempts
    assert retry_delays(attempts) == [1, 2, 4, 4, 4][:len(attempts)]
    assert all("[AUTHENTICATIONFAILED]" in a for a in attempts) and "Traceback" not in out
    assert time.monotonic() - first >= 8


def test_an_access_token_the_servers_refuse_is_replaced_once_from_the_refresh_token(oauth_box):
    """IMAP and SMTP: a token still valid by the clock but refused (revoked, expired early) is
    traded for a new one and the login tried once more; never a loop. The tokens this process
    holds are among the secrets every stream is scrubbed of."""
    from synedre import mailboxes, oauth, secrets
    from synedre.mail import transport

    box, server = oauth_box, oauth_box["oauth"]
    oauth.tokens = oauth.TokenCache()
    atlas = mailboxes.get("atlas")
    with atlas.session() as client:
        client.select_folder("INBOX", readonly=True)
    assert server.count("refresh_token") == 1
    held = server.issued()[-1]
    assert held in secrets.values() and held not in secrets.redactor().redact_text(f"token {held} here")
    assert (box["secrets"] / "atlas.refresh-token").read_text().strip() in secrets.values()
    assert server.client_secret in secrets.values()

    server.expire_access()  # refused from now on, though the fleet's clock says it has an hour left
    with atlas.session() as client:
        client.select_folder("INBOX", readonly=True)
    assert server.count("refresh_token") == 2

    server.expire_access()
    transport.deliver(atlas, "atlas@atelier-moreau.fr", "julien@atelier-moreau.fr",
                     b"Subject: t\r\nMessage-ID: <t@x>\r\n\r\nbody\r\n")
    assert server.count("refresh_token") == 3
    assert box["smtp"].logins == [("atlas", False), ("atlas", True)]
    assert len(box["smtp"].messages()) == 1


def test_a_token_endpoint_down_is_not_a_refused_login(oauth_box):
    """No answer from the token endpoint is transient (retried like a network error), never
    counted nor said as a refusal."""
    from synedre import mailboxes, oauth

    oauth.tokens = oauth.TokenCache()
    oauth_box["oauth"].stop()
    with pytest.raises(oauth.TokenUnavailable, match="did not answer"):
        with mailboxes.get("atlas").session():
            pass
    assert mailboxes.refusals() == {}


def test_a_refresh_token_the_provider_rotates_is_written_back_to_its_file(oauth_box):
    import stat

    from synedre import mailboxes, oauth

    box, server = oauth_box, oauth_box["oauth"]
    server.rotate = True
    path = box["secrets"] / "atlas.refresh-token"
    first = path.read_text().strip()
    for _ in range(2):  # each login from nothing held: a refresh, a new refresh token
        oauth.tokens = oauth.TokenCache()
        with mailboxes.get("atlas").session() as client:
            client.select_folder("INBOX", readonly=True)
        assert path.read_text().strip() in server.live_refresh_tokens()
    assert path.read_text().strip() != first and first not in server.live_refresh_tokens()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
