"""DKIM passes only for a valid signature by the From: domain over the whole body."""
import base64
import json
import subprocess

import dkim
import pytest

from synedre.ingest import dkim_verify
from tests.conftest import CORPUS

DKIM_PASS = {"P01", "P02", "P05", "P06", "P07", "P08", "P10", "P12", "P15", "P18", "P20", "P21"}
BODY = b"From: Marie <marie@boulangerie-dupont.fr>\r\nTo: atlas@atelier-moreau.fr\r\n" \
       b"Subject: test\r\nMessage-ID: <t@x>\r\n\r\nBonjour\r\n"


def from_values(raw: bytes) -> list[str]:
    import email
    return email.message_from_bytes(raw).get_all("From") or []


def test_corpus_dkim_verdicts_match_the_keys_file():
    lookup = dkim_verify.keys_file_lookup(CORPUS / "dkim-keys.json")
    passed = {p.name[:3] for p in sorted((CORPUS / "cases").glob("*.eml"))
              if dkim_verify.verify(p.read_bytes(), from_values(p.read_bytes()), lookup).passed}
    assert passed == DKIM_PASS


@pytest.fixture(scope="module")
def signer(tmp_path_factory):
    """A fresh RSA key published for two domains in a keys file."""
    d = tmp_path_factory.mktemp("dkim")
    key = subprocess.run(["openssl", "genrsa", "1024"], capture_output=True, check=True).stdout
    pub = subprocess.run(["openssl", "rsa", "-pubout", "-outform", "DER"], input=key,
                         capture_output=True, check=True).stdout
    record = "v=DKIM1; k=rsa; p=" + base64.b64encode(pub).decode()
    keys = d / "keys.json"
    keys.write_text(json.dumps({f"s1._domainkey.{dom}": record
                                for dom in ("boulangerie-dupont.fr", "evil-promo.test")}))
    return key, dkim_verify.keys_file_lookup(keys)


def sign(raw: bytes, key: bytes, domain: str, **kw) -> bytes:
    return dkim.sign(raw, b"s1", domain.encode(), key, include_headers=[b"from", b"subject"], **kw) + raw


def test_valid_signature_by_the_from_domain_passes(signer):
    key, lookup = signer
    assert dkim_verify.verify(sign(BODY, key, "boulangerie-dupont.fr"), from_values(BODY), lookup).passed


def test_valid_signature_by_another_domain_fails(signer):
    key, lookup = signer
    result = dkim_verify.verify(sign(BODY, key, "evil-promo.test"), from_values(BODY), lookup)
    assert not result.passed and result.reason.startswith("signer_not_from_domain")


def test_signature_covering_part_of_the_body_fails(signer):
    key, lookup = signer
    raw = sign(BODY, key, "boulangerie-dupont.fr", length=True) + b"Virez 5000 EUR svp\r\n"
    result = dkim_verify.verify(raw, from_values(raw), lookup)
    assert not result.passed and result.reason in {"partial_body_signature", "bad_signature"}


def test_tampered_body_fails(signer):
    key, lookup = signer
    raw = sign(BODY, key, "boulangerie-dupont.fr").replace(b"Bonjour", b"Bonsoir")
    result = dkim_verify.verify(raw, from_values(raw), lookup)
    assert not result.passed and result.reason in {"bad_signature", "invalid: ValidationError"}


def test_two_from_headers_fail_even_with_a_valid_signature(signer):
    key, lookup = signer
    raw = b"From: boss@atelier-moreau.fr\r\n" + sign(BODY, key, "boulangerie-dupont.fr")
    assert dkim_verify.verify(raw, from_values(raw), lookup).reason == "no_single_from_address"


def test_unknown_key_and_garbage_fail_without_raising(signer):
    _, lookup = signer
    raw = BODY.replace(b"boulangerie-dupont.fr", b"unknown.test")
    assert not dkim_verify.verify(b"DKIM-Signature: v=1; d=x\r\n" + raw, from_values(raw), lookup).passed
    assert not dkim_verify.verify(b"\x00\xff garbage", [], lookup).passed
