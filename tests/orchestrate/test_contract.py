"""The agent's contract file and the decisions taken from it (SPEC §8, §9.1–3)."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from synedre.orchestrate.contract import (
    LeanContract,
    RichContract,
    apply_downgrade,
    code_path_decision,
    is_no_code,
    read_contract,
)

pytestmark = pytest.mark.timeout(60)

RICH = {"ok": True, "tenant": "garage-martin", "routes_to_qa": ["/factures", "/factures/1042"],
        "commits": ["3f2a1b9"], "summary_md": "## Dates corrigées\n- parse the offset",
        "draft_reply_for_user": "Bonjour, c'est corrigé."}


def test_a_complete_rich_contract_validates(tmp_path):
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(RICH, ensure_ascii=False), encoding="utf-8")
    res = read_contract(path, "rich")
    assert res.valid and res.errors == [] and not res.partial
    assert res.contract == RichContract(**RICH)


def test_a_lean_contract_ignores_the_rich_fields():
    res = read_contract(json.dumps(RICH), "lean")
    assert res.valid and type(res.contract) is LeanContract
    assert res.contract.model_dump() == {"ok": True, "tenant": "garage-martin", "commits": ["3f2a1b9"],
                                         "summary_md": RICH["summary_md"], "lessons_applied": []}


def test_a_missing_file_gives_no_contract_and_says_so(tmp_path):
    res = read_contract(tmp_path / "absent.json", "rich")
    assert res.contract is None and not res.valid and "missing" in res.errors[0]


@pytest.mark.parametrize("text,error", [
    ("", "empty"), ("   \n", "empty"), ("ok: true", "invalid JSON"), ("{", "invalid JSON"),
    ('["ok"]', "not an object"), ("null", "not an object"),
])
def test_unusable_text_gives_no_contract_with_the_reason(text, error):
    res = read_contract(text, "rich")
    assert res.contract is None and error in res.errors[0]


def test_absent_fields_take_safe_defaults():
    res = read_contract("{}", "rich")
    assert res.valid
    assert res.contract == RichContract(ok=False, tenant=None, routes_to_qa=[], commits=[], summary_md="",
                                        draft_reply_for_user=None)


def test_wrong_types_are_listed_and_fall_back_to_defaults_while_the_rest_is_kept():
    text = json.dumps({**RICH, "ok": "true", "commits": "3f2a1b9", "routes_to_qa": ["/a", 3], "intent": "chantier"})
    res = read_contract(text, "rich")
    assert not res.valid and not res.partial
    assert {e.split(":")[0] for e in res.errors} == {"ok", "commits", "routes_to_qa.1", "intent"}
    c = res.contract
    assert (c.ok, c.commits, c.routes_to_qa, c.intent) == (False, [], [], None)
    assert (c.tenant, c.summary_md) == ("garage-martin", RICH["summary_md"])


def test_blank_values_count_as_absent():
    res = read_contract(json.dumps({"tenant": "  ", "commits": ["", "abc "], "draft_reply_for_user": " "}), "rich")
    assert (res.contract.tenant, res.contract.commits, res.contract.draft_reply_for_user) == (None, ["abc"], None)


@pytest.mark.parametrize("cut_after,kept", [
    ('"summary_md": "## Dates', {"ok", "tenant", "routes_to_qa", "commits"}),
    ('"routes_to_qa": ["/factures", ', {"ok", "tenant"}),
    ('"tenant": "garage-martin",', {"ok", "tenant"}),
    ('"ok": tr', set()),
])
def test_a_file_cut_mid_write_keeps_its_complete_members_and_is_partial(cut_after, kept):
    text = json.dumps(RICH, ensure_ascii=False)
    cut = text[:text.index(cut_after) + len(cut_after)]
    res = read_contract(cut, "rich")
    if not kept:
        assert res.contract is None and "invalid JSON" in res.errors[0]
        return
    assert res.partial and not res.valid and "incomplete JSON" in res.errors[0]
    assert {k for k in RICH if getattr(res.contract, k) == RICH[k]} == kept


def test_a_file_cut_inside_a_utf8_sequence_is_still_salvaged(tmp_path):
    data = json.dumps({"ok": True, "summary_md": "Dates corrigées"}, ensure_ascii=False).encode()
    path = tmp_path / "contract.json"
    path.write_bytes(data[:data.index("é".encode()) + 1])
    res = read_contract(path, "lean")
    assert res.partial and res.contract.ok is True and res.contract.summary_md == ""


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_reading_arbitrary_text_never_raises(text):
    for kind in ("lean", "rich"):
        res = read_contract(text, kind)
        assert res.contract is not None or res.errors


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=10)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from([*RICH, "intent", "complexity", "x"]), json_values), st.integers(0, 400))
def test_reading_any_object_cut_anywhere_never_raises(data, cut):
    text = json.dumps(data)[:cut]
    res = read_contract(text, "rich")
    assert res.contract is not None or res.errors
    assert not res.partial or res.contract is not None


@pytest.mark.parametrize("intent,complexity,no_code", [
    ("question", "leger", True), ("negociation", "leger", True), ("conseil", "plan", True),
    ("run", "leger", True), ("run", "plan", False), (None, None, True),
])
def test_only_run_plan_takes_the_code_path(intent, complexity, no_code):
    assert is_no_code(intent, complexity) is no_code


@pytest.mark.parametrize("classified,reported,expected", [
    (("run", "plan"), {"intent": "question"}, ("question", "leger")),
    (("run", "plan"), {"complexity": "leger"}, ("run", "leger")),
    (("run", "plan"), {"intent": "conseil", "complexity": "plan"}, ("conseil", "leger")),
    (("run", "plan"), {"intent": "run"}, ("run", "plan")),
    (("run", "plan"), {"intent": "noise"}, ("run", "plan")),          # not a downgrade target
    (("run", "plan"), {}, ("run", "plan")),
    (("question", "leger"), {"intent": "run", "complexity": "plan"}, ("question", "leger")),  # never upgrade
    (("run", "leger"), {"complexity": "plan"}, ("run", "leger")),
])
def test_the_agent_may_only_downgrade_toward_no_code(classified, reported, expected):
    assert apply_downgrade(*classified, RichContract(**reported)) == expected


def test_no_contract_or_a_lean_one_changes_nothing():
    assert apply_downgrade("run", "plan", None) == ("run", "plan")
    assert apply_downgrade("run", "plan", LeanContract(ok=True)) == ("run", "plan")


@pytest.mark.parametrize("fields,decision", [
    ({"tenant": "garage-martin", "routes_to_qa": ["/factures"], "commits": ["abc"]}, "deploy"),
    ({"tenant": "garage-martin", "commits": ["abc"]}, "orchestration_failed:missing_tenant_or_routes"),
    ({"routes_to_qa": ["/factures"], "commits": ["abc"]}, "orchestration_failed:missing_tenant_or_routes"),
    ({}, "no_code_analysis"),
    ({"routes_to_qa": ["/factures"]}, "no_code_analysis"),
    ({"tenant": "garage-martin", "routes_to_qa": ["/factures"]}, "deploy"),
])
def test_code_path_decision_follows_the_contract(fields, decision):
    assert code_path_decision(RichContract(**fields)) == decision
