"""Secrets in one place: gathered once per process, gathered again when a source changes."""
import os

import pytest

from synedre import mailboxes, secrets
from synedre.config import Settings

BOX = """[mailboxes.atlas]
imap_host = "127.0.0.1"
username = "atlas"
password_env = "{env}"
"""

pytestmark = pytest.mark.unit


def test_the_values_are_read_once_and_again_only_when_the_registry_or_a_password_changes(tmp_path, monkeypatch):
    registry = tmp_path / "mailboxes.toml"
    registry.write_text(BOX.format(env="TEST_SECRETS_PW_A"))
    monkeypatch.setenv("TEST_SECRETS_PW_A", "first-imap-password")
    monkeypatch.setenv("TEST_SECRETS_PW_B", "second-imap-password")
    reads = []
    real = mailboxes.load

    def counting(path=None):
        reads.append(path)
        return real(path)
    monkeypatch.setattr(mailboxes, "load", counting)
    s = Settings(_env_file=None, mailboxes_file=registry)
    assert "first-imap-password" in secrets.values(s)
    n = len(reads)
    for _ in range(20):  # every launch, deploy, QA run, ask and AI failure asks again
        assert "first-imap-password" in secrets.values(s)
        secrets.redactor(s)
    assert len(reads) == n  # the file was not read again
    registry.write_text(BOX.format(env="TEST_SECRETS_PW_B") + "\n")  # the registry changed
    os.utime(registry, ns=(1, 1))
    assert "second-imap-password" in secrets.values(s) and "first-imap-password" not in secrets.values(s)
    monkeypatch.setenv("TEST_SECRETS_PW_B", "rotated-imap-password")  # the password's variable changed
    assert "rotated-imap-password" in secrets.values(s)


def test_each_redactor_is_fresh_but_hides_every_configured_secret(tmp_path):
    key = tmp_path / "keys"
    key.mkdir()
    (key / "anthropic").write_text("sk-ant-from-the-key-file-0001\n")
    s = Settings(_env_file=None, ai_keys_dir=key)
    first, second = secrets.redactor(s), secrets.redactor(s)
    assert first is not second
    first.redact_text("password=Sup3rS3cretValue99 in one launch's stream")
    assert first.remembered == 1 and second.remembered == 0  # nothing learned by one reaches the other
    assert "Sup3rS3cretValue99" in second.redact_text("Sup3rS3cretValue99")  # bare, it is no secret to it
    assert "sk-ant-from-the-key-file-0001" not in second.redact_text("key sk-ant-from-the-key-file-0001 here")
    (key / "anthropic").write_text("sk-ant-rotated-key-file-00002\n")  # a mounted secret rotated
    os.utime(key / "anthropic", ns=(1, 1))
    assert "sk-ant-rotated-key-file-00002" not in secrets.redactor(s).redact_text("sk-ant-rotated-key-file-00002")


def test_an_oauth2_mailbox_s_client_secret_and_refresh_token_are_secrets_and_a_rotation_is_seen(tmp_path, monkeypatch):
    token = tmp_path / "atlas.refresh-token"
    token.write_text("rt-first-refresh-token-0001\n")
    registry = tmp_path / "mailboxes.toml"
    registry.write_text('[mailboxes.atlas]\nimap_host = "127.0.0.1"\nusername = "atlas"\nauth = "oauth2"\n'
                        '[mailboxes.atlas.oauth2]\nprovider = "custom"\nclient_id = "c"\n'
                        'token_url = "https://idp.example/token"\nscopes = ["mail"]\n'
                        f'client_secret_env = "TEST_SECRETS_CLIENT_SECRET"\nrefresh_token_file = "{token}"\n')
    monkeypatch.setenv("TEST_SECRETS_CLIENT_SECRET", "cs-client-secret-0001")
    s = Settings(_env_file=None, mailboxes_file=registry)
    assert {"cs-client-secret-0001", "rt-first-refresh-token-0001"} <= set(secrets.values(s))
    token.write_text("rt-rotated-refresh-token-0002\n")  # the provider rotated it; the fleet wrote it back
    os.utime(token, ns=(1, 1))
    assert "rt-rotated-refresh-token-0002" in secrets.values(s)
    monkeypatch.setenv("TEST_SECRETS_CLIENT_SECRET", "cs-client-secret-0002")
    assert "cs-client-secret-0002" not in secrets.redactor(s).redact_text("cs-client-secret-0002")
