"""Set-up shared by the tests that send mail to the founder (tests/mail, tests/report): the
registry's atlas mailbox on the test Dovecot with its SMTP on the test sink, and the founder."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest

from synedre.config import get_settings

if TYPE_CHECKING:
    from tests.services.dovecot import Dovecot
    from tests.services.smtp import SmtpSink

FOUNDER = "julien@atelier-moreau.fr"
ATLAS = "atlas@atelier-moreau.fr"


def use_atlas_mailbox(tmp_path: Path, dovecot: Dovecot, sink: SmtpSink, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the mailbox registry's `atlas` at ``dovecot`` (IMAP) and ``sink`` (SMTP), no TLS."""
    path = tmp_path / "mailboxes.toml"
    path.write_text(
        f'[mailboxes.atlas]\nimap_host = "{dovecot.host}"\nimap_port = {dovecot.port}\nimap_tls = false\n'
        f'smtp_host = "{sink.host}"\nsmtp_port = {sink.port}\nsmtp_tls = false\n'
        f'username = "{dovecot.username}"\npassword_env = "TEST_ATLAS_PASSWORD"\nfolder = "INBOX"\n')
    monkeypatch.setenv("SYNEDRE_MAILBOXES_FILE", str(path))
    monkeypatch.setenv("TEST_ATLAS_PASSWORD", dovecot.password)
    get_settings.cache_clear()


def insert_founder(conn: psycopg.Connection, emails: list[str]) -> None:
    """The founder (id 1, Julien Moreau) with these addresses, mailed from ``ATLAS``."""
    conn.execute("INSERT INTO synedre.founder (id, name, emails, domain, atlas_address) "
                 "VALUES (1, 'Julien Moreau', %s, 'atelier-moreau.fr', %s)", (emails, ATLAS))
