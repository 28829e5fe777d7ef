"""`synedre mailbox authorize` against the scripted OAuth server: the device-code flow and the
pasted-code flow each store a refresh token that works (mode 0600, printed nowhere), and
Microsoft 365's app-only access is checked with nothing to store."""
from __future__ import annotations

import stat
import subprocess
import sys
import time

import pytest
import requests

from synedre import mailboxes, oauth as oauth_mod
from tests.services import stack
from tests.services.leaks import CommandLines, assert_absent
from tests.test_mailbox_oauth import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def authorize(box, flow: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "synedre.cli", "mailbox", "authorize", "atlas", "--flow", flow],
                            env=box["env"], cwd=stack.ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_until(proc: subprocess.Popen, needle: str, timeout: float = 60) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise AssertionError(f"ended before {needle!r}: {lines} {proc.stderr.read()}")  # type: ignore[union-attr]
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"no {needle!r} within {timeout}s: {lines}")


def assert_stored_and_working(box, out: str, before: str) -> str:
    path = box["secrets"] / "atlas.refresh-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = path.read_text().strip()
    assert stored != before and stored in box["oauth"].live_refresh_tokens()
    assert stored not in out, "the refresh token was printed"
    assert f"refresh token stored in {path} (mode 0600)" in out and "login as atlas ok (XOAUTH2)" in out
    # and it works here too, from nothing held: a new access token from it, then XOAUTH2 on Dovecot
    oauth_mod.tokens = oauth_mod.TokenCache()
    grants = box["oauth"].count("refresh_token")
    with mailboxes.get("atlas").session() as client:
        assert client.select_folder("INBOX", readonly=True)
    assert box["oauth"].count("refresh_token") == grants + 1
    return stored


def test_the_device_code_flow_stores_a_working_refresh_token_printed_nowhere(oauth_box):
    box = oauth_box
    before = (box["secrets"] / "atlas.refresh-token").read_text().strip()
    (box["secrets"] / "atlas.refresh-token").unlink()  # the first consent: no file yet
    with CommandLines() as cmdlines:
        proc = authorize(box, "device")
        first = read_until(proc, "enter the code")[-1]
        assert f"{box['oauth'].url}/device/verify" in first
        code = first.split("enter the code ")[1].split()[0]
        # the CLI polls meanwhile and is told authorization_pending (however slow the machine)
        deadline = time.monotonic() + 30
        while box["oauth"].count("urn:ietf:params:oauth:grant-type:device_code") < 1:
            assert time.monotonic() < deadline, "the CLI never polled the token endpoint"
            time.sleep(0.1)
        box["oauth"].approve(code)  # the user, on the verification page
        out, errs = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + errs
    assert box["oauth"].count("urn:ietf:params:oauth:grant-type:device_code") >= 2  # pending, then granted
    stored = assert_stored_and_working(box, first + out + errs, before)
    assert_absent([stored, box["oauth"].client_secret], cli_output=first + out + errs, command_lines=cmdlines.text())


def test_the_pasted_code_flow_stores_a_working_refresh_token_printed_nowhere(oauth_box):
    box = oauth_box
    before = (box["secrets"] / "atlas.refresh-token").read_text().strip()
    with CommandLines() as cmdlines:
        proc = authorize(box, "code")
        lines = read_until(proc, "/authorize?")
        address = lines[-1].strip()
        assert "code_challenge_method=S256" in address and "scope=mail" in address
        # the browser on another machine: consent, then a redirect to a loopback nothing answers on
        answer = requests.get(address, allow_redirects=False, timeout=10)
        assert answer.status_code == 302
        pasted = answer.headers["Location"]
        assert pasted.startswith(oauth_mod.PASTE_REDIRECT_URI)
        out, errs = proc.communicate(pasted + "\n", timeout=60)
    assert proc.returncode == 0, out + errs
    printed = "".join(lines) + out + errs
    stored = assert_stored_and_working(box, printed, before)
    code = pasted.split("code=")[1].split("&")[0]
    assert_absent([stored, box["oauth"].client_secret, code], cli_output=printed.replace(pasted, ""),
                  command_lines=cmdlines.text())


def test_a_pasted_address_from_another_request_is_refused_and_nothing_stored(oauth_box):
    box = oauth_box
    before = (box["secrets"] / "atlas.refresh-token").read_text()
    proc = authorize(box, "code")
    read_until(proc, "/authorize?")
    out, errs = proc.communicate(f"{oauth_mod.PASTE_REDIRECT_URI}?code=ac-forged&state=not-ours\n", timeout=60)
    assert proc.returncode == 1
    assert "its state differs" in errs and len(errs.strip().splitlines()) == 1
    assert (box["secrets"] / "atlas.refresh-token").read_text() == before


def test_app_only_access_is_checked_and_stores_nothing(oauth_box):
    box = oauth_box
    text = box["registry"].read_text()
    text = text.replace(f'refresh_token_file = "{box["secrets"] / "atlas.refresh-token"}"\n', "app_only = true\n")
    box["registry"].write_text(text)
    (box["secrets"] / "atlas.refresh-token").unlink()
    done = cli(["mailbox", "authorize", "atlas"], box["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no refresh token to store" in done.stdout and "login as atlas ok (XOAUTH2)" in done.stdout
    assert box["oauth"].count("client_credentials") >= 1 and box["oauth"].count("refresh_token") == 0
    assert not (box["secrets"] / "atlas.refresh-token").exists()


def test_the_fleet_will_not_start_without_the_refresh_token_and_says_how_to_get_one(oauth_box):
    box = oauth_box
    (box["secrets"] / "atlas.refresh-token").unlink()
    done = cli(["fleet"], box["env"])
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert "atlas.refresh-token does not exist" in line and "run `synedre mailbox authorize atlas`" in line
