"""The walk of `Redactor.redact_obj` takes shortcuts for speed (a stream event is a dozen
nodes): JSON types told by `type(…) is`, keys seen clean remembered with their kind, nothing
copied where nothing was hidden, numbers left unencoded when no exact value could be inside
one. These properties hold it to the plain walk it replaced: the same output, the same values
learned, for any tree of any secret shape, over a sequence of objects (the caches carry
over from one to the next)."""
import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from synedre.redact import Redactor, _hint_value, _key_kind, _map_strings

NUMERIC_SECRET = "482913"  # a PIN: only the exact pass finds it, inside a number too
SECRETS = ["S3cretPassw0rd-db", NUMERIC_SECRET, "envS3cretValue42"]
SHAPES = [  # one of each kind of rule, and what the exact pass knows
    "S3cretPassw0rd-db", NUMERIC_SECRET, "sk-ant-api03-TESTSECRET0123456789abcdef", "ghp_" + "a1B2" * 6,
    "AKIAABCDEFGHIJKLMNOP", "DB_PASSWORD=hunter2Xy9!", "postgresql://app:Pa55-w0rd@db:5432/x",
    "Authorization: Bearer abcdefghijklmnop0123", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    '{"api_key": "Zx9-Qm2_Lp7vW"}', "mysql -u root -pS3cr3tPw db", "-----BEGIN RSA PRIVATE KEY-----\nMIIB",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "the password for alice is Tr0ub4dor&3x",
    "xoxb-1234567890-abcdefghij", b"S3cretPassw0rd-db".hex(), "UzNjcmV0UGFzc3cwcmQtZGI=",
]
KEYS = ["type", "text", "content", "api_key", "token", "input_tokens", "password", "nonce", "salt",
        "authorization", "author", "DB_PASS", "id", "session_id"]


class PlainWalk(Redactor):
    """`redact_obj`'s walk as it was before the shortcuts: every node visited, every dict and
    list copied, every number encoded while there is an exact value."""

    def _obj(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self._text(obj)
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                if not isinstance(k, str):
                    out[k] = self._obj(v)
                    continue
                name, (secret_key, hint_key) = self._text(k), _key_kind(k)
                if secret_key and isinstance(v, str) and v:
                    out[name] = self._hide("json_secret", v)
                elif hint_key and isinstance(v, str) and _hint_value(v):
                    out[name] = self._hide("entropy_secret", v)
                else:
                    out[name] = self._obj(v)
            return out
        if isinstance(obj, (list, tuple)):
            return [self._obj(v) for v in obj]
        if isinstance(obj, (int, float)) and not isinstance(obj, bool) and self._exact:
            text = json.dumps(obj)
            return obj if (hidden := self._exact_pass(text)) == text else hidden
        return obj


texts = st.one_of(
    st.sampled_from(KEYS + SHAPES),
    st.text(max_size=12),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=8), st.sampled_from(SHAPES), st.text(max_size=8)),
)
numbers = st.integers() | st.floats(allow_nan=False) | st.sampled_from(
    [int(NUMERIC_SECRET), 1_482_913_000, -4829130, 48291.3, 0.482913, 482913e10])
trees = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.sampled_from(KEYS) | texts, inner, max_size=5),
    max_leaves=14)


def typed(obj: Any) -> str:
    """The tree with every value's type: 1 == True == 1.0 in Python, not in a stored line."""
    return repr(_map_strings(obj, lambda s: s)) if not isinstance(obj, tuple) else repr(obj)


@pytest.mark.timeout(120)
@settings(deadline=None, max_examples=300)
@given(objs=st.lists(trees, min_size=1, max_size=6), secrets=st.sampled_from([SECRETS, [], ["Tr0ub4dor&3x"]]))
def test_the_fast_walk_hides_and_learns_exactly_what_the_plain_walk_does(objs, secrets):
    fast, plain = Redactor(secrets), PlainWalk(secrets)
    for obj in objs:
        before = copy.deepcopy(obj)
        got, want = fast.redact_obj(obj), plain.redact_obj(obj)
        assert typed(got) == typed(want)
        assert json.dumps(got) == json.dumps(want)
        assert typed(obj) == typed(before)  # the input is never mutated
        assert fast._remembered == plain._remembered


@pytest.mark.timeout(60)
@settings(deadline=None, max_examples=200)
@given(n=numbers, secret=st.text("0123456789.-+eE", min_size=6, max_size=8) | st.sampled_from(["Infinity", "1e+100"]))
def test_a_secret_that_could_be_written_in_a_number_is_still_found_in_one(n, secret):
    tree = {"usage": {"input_tokens": n}, "n": [n]}
    assert json.dumps(Redactor([secret]).redact_obj(tree)) == json.dumps(PlainWalk([secret]).redact_obj(tree))


def test_an_object_with_nothing_to_hide_is_returned_itself_and_one_member_changed_copies_its_path():
    r = Redactor(SECRETS)
    clean = {"type": "user", "message": {"content": [{"type": "text", "text": "all green"}]}, "n": 3}
    assert r.redact_obj(clean) is clean
    dirty = {"type": "user", "message": {"content": [{"type": "text", "text": f"pw {SECRETS[0]}"}]},
             "usage": {"input_tokens": 3}}
    out = r.redact_obj(dirty)
    assert out["message"]["content"][0]["text"] == "pw [REDACTED:secret]"
    assert dirty["message"]["content"][0]["text"] == f"pw {SECRETS[0]}"  # not mutated
    assert out["usage"] is dirty["usage"]  # unchanged members are shared, not copied
