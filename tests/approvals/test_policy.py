"""The approval policy as data and the reply's verdict, without services."""
from __future__ import annotations

from pathlib import Path

import pytest

from synedre import ROOT
from synedre.approvals import policy
from synedre.approvals.decisions import Thread, judge, verdict_of

BASE = policy.LaunchFacts(intent="run", complexity="leger", first_launch=False, confidence=0.95, estimated_usd=5.0,
                          spent_today_usd=0.0, daily_cap_usd=200.0, tools_wider_than_lean=False)


def facts(**changes) -> policy.LaunchFacts:
    return policy.LaunchFacts(**{**BASE.__dict__, **changes})


def test_the_shipped_policy_loads_and_every_rule_names_itself():
    p = policy.load(ROOT / "approval-policy.toml")
    assert policy.evaluate(p, BASE) is None  # a routine launch goes
    cases = {"approval_rule_run_plan": facts(complexity="plan"),
             "approval_rule_first_launch": facts(first_launch=True),
             "approval_rule_low_confidence": facts(confidence=0.79),
             "approval_rule_spend_share": facts(spent_today_usd=96.0),
             "approval_rule_wide_tools": facts(tools_wider_than_lean=True)}
    for rule, f in cases.items():
        asked = policy.evaluate(p, f)
        assert asked is not None and asked.rule == rule, rule
    assert policy.evaluate(p, facts(confidence=0.8)) is None  # strictly under the threshold
    assert policy.evaluate(p, facts(spent_today_usd=95.0)) is None  # 95 + 5 is not over half of 200


def test_a_rule_left_out_is_off_and_parameters_come_from_the_file(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[low_confidence]\nenabled = true\nbelow = 0.95\n")
    p = policy.load(path)
    assert policy.evaluate(p, facts(complexity="plan", first_launch=True, tools_wider_than_lean=True)) is None
    assert policy.evaluate(p, facts(confidence=0.9)).rule == "approval_rule_low_confidence"


@pytest.mark.parametrize("text, error", [
    ("[run_plan]\nenabled = true\nwhen = 'always'\n", "run_plan.when: Extra inputs are not permitted"),
    ("[unknown_rule]\nenabled = true\n", "unknown_rule: Extra inputs are not permitted"),
    ("[spend_share]\nenabled = true\nshare = 2\n", "spend_share.share: Input should be less than or equal to 1"),
    ("[run_plan\n", "not TOML"),
])
def test_a_bad_policy_file_says_which_key_and_what_it_accepts(tmp_path, text, error):
    path = tmp_path / f"bad{abs(hash(text))}.toml"
    path.write_text(text)
    with pytest.raises(policy.PolicyError) as exc:
        policy.load(path)
    assert str(path) in str(exc.value) and error in str(exc.value)


def test_a_missing_policy_file_is_named():
    with pytest.raises(policy.PolicyError, match="approval policy /nonexistent/p.toml"):
        policy.load(Path("/nonexistent/p.toml"))


@pytest.mark.parametrize("cover, verdict, note", [
    ("OK", "ok", None), ("ok, allez-y !", "ok", "allez-y !"), ("Oui.\nMerci", "ok", "Merci"),
    ("NON, attendez jeudi", "non", "attendez jeudi"), ("non", "non", None),
    ("Okay then", None, None), ("Nonobstant", None, None), ("", None, None),
    ("Je ne sais pas. OK ?", None, None),  # the verdict opens the reply
])
def test_the_verdict_opens_the_reply_s_own_text(cover, verdict, note):
    assert verdict_of(cover) == (verdict, note)


RAW = b"From: Julien <julien@atelier-moreau.fr>\r\nSubject: Re: x\r\n\r\nOK\r\n"
FOUNDER = frozenset({"julien@atelier-moreau.fr"})
REQUEST = Thread(7, "approval", "abc123")


def judged(**kw):
    args = dict(raw=RAW, sender="julien@atelier-moreau.fr", dkim_pass=True, subject="Re: Accord requis abc123 : x",
                body="OK\n> Référence abc123", cover="OK", founder=FOUNDER)
    return judge(REQUEST, **{**args, **kw})


def test_a_reply_is_a_decision_only_when_every_check_holds():
    assert judged().verdict == "ok" and judged().why_not is None
    assert judged(sender="paul@garage-martin.fr").why_not == "not_from_the_founder"
    forged = b"From: Julien <julien@atelier-moreau.fr>\r\nFrom: x@evil.test\r\n\r\nOK\r\n"
    assert judged(raw=forged).why_not == "not_from_the_founder"  # two From: headers
    other = b"From: Julien <julien@evil-promo.test>\r\n\r\nOK\r\n"
    assert judged(raw=other).why_not == "not_from_the_founder"  # the header From: is someone else
    assert judged(dkim_pass=False).why_not == "not_dkim_verified"
    assert judged(subject="Re: x", body="OK").why_not == "token_missing"
    assert judged(cover="Merci", body="Merci\n> OK abc123").why_not == "no_verdict_in_the_reply_text"
    assert judged(cover="Non, attendez", body="Non, attendez\n> OK abc123").verdict == "non"
