"""Exact outputs of the redactor where the property tests only check absence: what stays
in clear around a secret, what is remembered and what is not, lines that are not clean
UTF-8 or JSON. Written to kill the mutants that survived the mutation run
(docs/mutation.md); each test says the behaviour it holds."""
import json

import pytest

from synedre.redact import Redactor
from synedre.redact.exact import MIN_SECRET_LEN

pytestmark = pytest.mark.unit

ACCESS, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_an_aws_pair_hides_both_keys_and_keeps_the_words_between_and_around_them():
    text = f"before {ACCESS} and the secret is {SECRET} after"
    assert Redactor().redact_text(text) == \
        "before [REDACTED:aws_access_key] and the secret is [REDACTED:aws_access_key] after"


def test_a_second_secret_on_a_line_that_already_holds_a_marker_is_hidden():
    text = "[REDACTED:secret] then password=S3cr3t-Value-9 end"
    out = Redactor().redact_text(text)
    assert "S3cr3t-Value-9" not in out and out.startswith("[REDACTED:secret] then password=")


def test_a_secret_keyed_value_that_starts_with_a_bracket_is_hidden():
    out = Redactor().redact_obj({"api_key": "[not-a-marker-9f8e7d"})
    assert out == {"api_key": "[REDACTED:json_secret]"}


@pytest.mark.parametrize("marker", ["[REDACTED:secret]", "[REDACTED:json_secret]", "[REDACTED]"])
def test_redacting_what_was_redacted_changes_nothing(marker):
    r = Redactor()
    assert r.redact_obj({"password": marker}) == {"password": marker}
    assert r.remembered == 0  # a marker is never learned as a secret


def test_a_value_hidden_by_its_shape_is_remembered_and_hidden_bare_later():
    value = "Xy7pQ2"
    assert len(value) == MIN_SECRET_LEN  # the shortest value worth remembering
    r = Redactor()
    r.redact_text(f"postgres://app:{value}@db.example.org/prod")
    assert r.remembered == 1
    assert r.redact_text(f"it was {value} all along") == "it was [REDACTED:secret] all along"


@pytest.mark.parametrize("value", ["test-key-value", "passwd12", "key-1-key-1"])
def test_a_plain_value_under_a_secret_name_is_hidden_there_but_not_learned(value):
    # Only its name says it is secret and it does not look random: hidden where it stands,
    # not learned (it would then be hidden all over the stream).
    r = Redactor()
    assert r.redact_obj({"token": value}) == {"token": "[REDACTED:json_secret]"}
    assert r.redact_text(f"password = {value}") == "password = [REDACTED:env_secret]"
    assert r.remembered == 0
    assert r.redact_text(f"the fixture {value} is public") == f"the fixture {value} is public"


def test_a_bare_aws_secret_key_becomes_its_marker_exactly():
    assert Redactor().redact_text(f"value {SECRET} end") == "value [REDACTED:aws_secret_key] end"


def test_a_marker_is_never_cut_by_a_later_rule():
    # The user part of `curl -u` holds a configured secret: the marker put there is kept whole.
    out = Redactor(["Q9zLkW2mVb7Ty"]).redact_text("curl -u dQ9zLkW2mVb7Tyeploy:Curl-Us3r-pw https://x.example")
    assert "[REDACTED:secret]" in out and "[REDACTED:[REDACTED" not in out and "Q9zLkW2mVb7Ty" not in out


def test_values_that_are_not_text_pass_through_and_non_string_keys_keep_their_values():
    import datetime
    when = datetime.datetime(2026, 12, 2, 6, 0)
    r = Redactor(["Q9zLkW2mVb7Ty"])
    assert r.redact_obj({"at": when, "none": None, "flag": False}) == {"at": when, "none": None, "flag": False}
    out = r.redact_obj({1: "password=S3cr3t-Value-9", 2: ["Q9zLkW2mVb7Ty"], "after": "Q9zLkW2mVb7Ty"})
    assert out == {1: "password=[REDACTED:env_secret]", 2: ["[REDACTED:secret]"], "after": "[REDACTED:secret]"}


def test_a_line_that_is_not_utf8_is_redacted_not_refused():
    line = b'{"msg": "\xff\xfe password=S3cr3t-Value-9"}\r\n'
    out = Redactor().redact_line(line)
    assert isinstance(out, bytes) and out.endswith(b"\r\n") and b"S3cr3t-Value-9" not in out
    assert "\ufffd" in json.loads(out)["msg"]


def test_a_line_keeps_its_end_and_a_secret_ending_in_x_is_hidden_whole():
    secret = "Q9zLkW2mVb7XX"
    out = Redactor([secret]).redact_line(f"deploy with {secret}\n")
    assert out == "deploy with [REDACTED:secret]\n"


@pytest.mark.parametrize("lead", ["", "  ", "\t"])
@pytest.mark.parametrize("shape", ["object", "array"])
def test_a_json_line_is_decoded_before_redaction_even_indented(lead, shape):
    secret = "Q9zLkW2mVb7Ty"
    escaped = "".join(f"\\u{ord(ch):04x}" for ch in secret)  # the secret only as JSON escapes
    body = f'{{"note": "{escaped}"}}' if shape == "object" else f'["{escaped}"]'
    out = Redactor([secret]).redact_line(lead + body)
    assert "[REDACTED:secret]" in out and secret not in out and escaped not in out


def test_a_json_line_keeps_its_non_ascii_text_readable():
    assert Redactor().redact_line('{"msg": "déployé à 14h"}') == '{"msg": "déployé à 14h"}'


def test_a_header_value_runs_to_the_end_of_its_line_trailing_blanks_included():
    # A line value (headers, YAML) is the rest of the line: the blanks before the line break
    # belong to it and are hidden with it; only the line break itself is kept.
    assert Redactor().redact_line("password: hunter2-long  \t\r\n") == "password: [REDACTED:header_secret]\r\n"


@pytest.mark.parametrize("number", [1000000.0, 4000000, -20000001])
def test_a_configured_secret_of_digits_is_hidden_inside_a_json_number(number):
    # Found by the property test during the mutation run: a secret "000000" inside 1000000.0.
    # The number becomes a string with the marker where the secret was.
    out = Redactor(["000000"]).redact_line(json.dumps({"type": "user", "n": number, "ok": True, "k": 7}))
    back = json.loads(out)
    assert "000000" not in out and "[REDACTED:secret]" in back.pop("n")
    assert back == {"type": "user", "ok": True, "k": 7}  # booleans and other numbers untouched
