"""Properties of the stream's redaction (SPEC §8 Stream, §13): a secret never survives,
wherever it sits in a JSON line, however the pty cuts the stream, however it is escaped."""
import base64
import json
import string
from urllib.parse import quote

import pytest
from hypothesis import assume, given, settings, strategies as st

from synedre.redact import Redactor
from synedre.redact.exact import MIN_SECRET_LEN
from synedre.redact.rules import KINDS
from synedre.spawn.stream import LineReader
from tests.spawn.test_redact import strings_in

MARKERS = [f"[REDACTED:{k}]" for k in KINDS] + ["[REDACTED]"]
# Brackets excluded: a marker's own brackets could complete such a secret (see redact.py).
SECRETS = st.text(st.characters(blacklist_characters="[]", blacklist_categories=("Cs",)),
                  min_size=MIN_SECRET_LEN, max_size=30)
BOUNDED = settings(deadline=None, max_examples=150)


def forms(secret: str) -> set[str]:
    """How the secret can show up in a stored line: as is, JSON-escaped, URL-encoded, base64."""
    return {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
            quote(secret, safe=""), base64.b64encode(secret.encode()).decode()}


def embedded(secret: str) -> st.SearchStrategy[str]:
    """A string that holds the secret, in one of its forms, anywhere."""
    return st.builds(lambda a, f, b: a + f + b, st.text(max_size=10), st.sampled_from(sorted(forms(secret))),
                     st.text(max_size=10))


def json_trees(texts: st.SearchStrategy[str]) -> st.SearchStrategy:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
                        max_leaves=12)


def assert_hidden(secret: str, line: str) -> None:
    """Not in any string of the stored line; nor in its text, for the forms that JSON's own
    punctuation cannot spell out (`", "` between two strings is not a leak)."""
    for f in forms(secret):
        assert all(f not in s for s in strings_in(json.loads(line))), f
        if '"' not in f and "\\" not in f:
            assert f not in line, f


def usable(secret: str) -> bool:
    return not any(f in m for m in MARKERS for f in forms(secret))  # marker text could hold it


@pytest.mark.timeout(60)
@BOUNDED
@given(data=st.data(), secret=SECRETS)
def test_a_configured_secret_never_survives_anywhere_in_a_json_line(data, secret):
    assume(usable(secret))
    texts = st.text(max_size=12) | embedded(secret)
    event = {"type": "user", "payload": [data.draw(json_trees(texts)), data.draw(embedded(secret))]}
    line = json.dumps(event, ensure_ascii=data.draw(st.booleans()))
    r = Redactor([secret])
    assert_hidden(secret, r.redact_line(line + "\n").rstrip("\n"))
    assert_hidden(secret, r.redact_line(line.encode()).decode())
    assert_hidden(secret, json.dumps(r.redact_obj(json.loads(line))))  # the runner's path
    raw = r.redact_text(line)  # a line that is not parsed: redacted as text
    assert all(f not in raw for f in forms(secret) if '"' not in f and "\\" not in f)


@pytest.mark.timeout(60)
@BOUNDED
@given(data=st.data(), secret=SECRETS, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_the_pty_reader_s_chunks_never_let_a_secret_through(data, secret, cuts):
    # As runner.py feeds it: pty reads -> LineReader -> redact_obj per object -> one NDJSON line.
    assume(usable(secret))
    events = [{"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                         "content": data.draw(embedded(secret))}]}},
              {"type": "assistant", "message": {"content": [{"type": "text", "text": data.draw(embedded(secret))}]}},
              {"type": "result", "subtype": "success", "result": data.draw(embedded(secret))}]
    raw = b"\x1b[?25l" + b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\r\n" for e in events)
    raw = raw[:-2]  # the last line comes without its newline: flushed by close()
    bounds = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})
    reader, r, stored = LineReader(), Redactor([secret]), []
    for a, b in zip(bounds, bounds[1:], strict=False):
        stored += [json.dumps(r.redact_obj(o), ensure_ascii=False) for o in reader.feed(raw[a:b])]
    stored += [json.dumps(r.redact_obj(o), ensure_ascii=False) for o in reader.close()]
    assert len(stored) == len(events)
    for line in stored:
        assert_hidden(secret, line)


NAMES = st.sampled_from(["ANTHROPIC_API_KEY", "DB_PASSWORD", "token", "Secret", "x_api_key", "MYSQL_PWD", "auth"])
VALUES = st.text(string.ascii_letters + string.digits + "!#$%&*+-./:=?@^_~'\"\\ ", min_size=1, max_size=30)
OPENSSH_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQy"
RSA_BODY = "MIIEowIBAAKCAQEAx8wL0aJm1pQ9Rk3yNmx7Jk2Xk1Jf0bS0d8cZpA2m4vW3sQ1o"
KEYS = [f"-----BEGIN OPENSSH PRIVATE KEY-----\n{OPENSSH_BODY}\nNTUxOQAAACDx\n-----END OPENSSH PRIVATE KEY-----",
        f"-----BEGIN RSA PRIVATE KEY-----\n{RSA_BODY}\nq2yV7f9yDkq8==\n-----END RSA PRIVATE KEY-----"]


@pytest.mark.timeout(60)
@BOUNDED
@given(name=NAMES, value=VALUES, sep=st.sampled_from(["=", " = ", ": ", '": "', "':'", " -> "]),
       newline=st.sampled_from(["\n", "\r\n"]), depth=st.integers(0, 3), key=st.sampled_from(KEYS))
def test_a_value_never_swallows_the_line_break_before_a_private_key(name, value, sep, newline, depth, key):
    text = f"{name}{sep}{value}{newline}{key}"
    for _ in range(depth):  # .env text inside JSON inside JSON…
        text = json.dumps(text)
    body = key.splitlines()[1]
    assert body not in Redactor().redact_text(text)
    assert body not in json.dumps(Redactor().redact_obj({"type": "user", "content": text}))


PASSWORDS = st.text(string.ascii_letters + string.digits + "!#&*+-.=?@^_~", min_size=8, max_size=24).filter(
    lambda p: any(c.isalpha() for c in p) and any(c.isdigit() for c in p))


@pytest.mark.timeout(60)
@BOUNDED
@given(pw=PASSWORDS, prefix=st.text(max_size=20), form=st.sampled_from(["raw", "url", "base64", "basic"]))
def test_a_password_seen_once_in_a_url_is_hidden_in_any_later_form(pw, prefix, form):
    r = Redactor()
    first = r.redact_obj({"type": "user", "content": f"$ psql postgresql://app:{quote(pw, safe='')}@db/app"})
    assert pw not in json.dumps(first) and r.remembered
    later = {"raw": pw, "url": quote(pw, safe=""), "base64": base64.b64encode(pw.encode()).decode(),
             "basic": base64.b64encode(f"app:{pw}".encode()).decode()}[form]
    line = json.dumps(r.redact_obj({"type": "assistant", "text": f"{prefix}{later} again"}))
    for f in (pw, quote(pw, safe=""), base64.b64encode(pw.encode()).decode(), later):
        assert f not in line
