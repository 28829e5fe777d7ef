"""Each guard rail alone, then the chain's order (SPEC §6)."""
import dataclasses

import pytest

from synedre.classify import rules
from synedre.classify.resolution import Client
from synedre.classify.schema import Classification

PAYING = Client(1, "garage-martin", "Garage Martin", "normal", 1200.0, "active")
TRIAL = Client(2, "cabinet-lefevre", "Cabinet Lefèvre", "low", 0.0, "trial")


def facts(**kw):
    base = dict(dkim_pass=True, subject="hello", from_founder=False, from_atlas=False,
                has_attachments=False, envelope_client=None)
    return rules.Facts(**{**base, **kw})


def c(intent="noise", complexity="leger", confidence=0.9):
    return Classification(intent=intent, complexity=complexity, confidence=confidence)


@pytest.mark.parametrize("subject,dkim,fires", [
    ("Fwd: [Atlas] Run 1042 terminé", True, True),
    ("TR: Fwd: [atlas] recap", True, True),
    ("Fwd: [Atlas] Run 1042 terminé", False, False),   # forgeable without DKIM
    ("Re: [Atlas] Run 1042", True, False),
    ("Fwd: une demande", True, False),
])
def test_self_forward_of_an_atlas_recap_needs_dkim_and_the_founder(subject, dkim, fires):
    rule = rules.SelfForwardAtlasRecap()
    assert rule.check(facts(subject=subject, dkim_pass=dkim, from_founder=True)) is fires
    assert rule.check(facts(subject=subject, dkim_pass=dkim, from_founder=False)) is False


@pytest.mark.parametrize("subject,dkim,atlas,fires", [
    ("[À VALIDER → Boulangerie Dupont] Run", True, True, True),
    ("[A VALIDER -> Garage] x", True, True, True),
    ("[À VALIDER → Garage Martin] Né", False, True, False),
    ("[À VALIDER → Garage Martin] Né", True, False, False),
])
def test_validation_copy_needs_dkim_and_the_atlas_sender(subject, dkim, atlas, fires):
    assert rules.ValidationCopy().check(facts(subject=subject, dkim_pass=dkim, from_atlas=atlas)) is fires


def test_complexity_is_forced_to_leger_outside_run():
    rule = rules.ComplexityOnlyForRun()
    assert rule.apply(facts(), c("question", "plan")).complexity == "leger"
    assert rule.apply(facts(), c("run", "plan")) is None


@pytest.mark.parametrize("confidence,fires", [(0.49, True), (0.5, False), (0.0, True)])
def test_confidence_floor(confidence, fires):
    out = rules.ConfidenceFloor().apply(facts(), c("run", "plan", confidence))
    assert (out is not None) is fires
    if fires:
        assert (out.intent, out.complexity) == ("noise", "leger")


@pytest.mark.parametrize("confidence,fires", [(0.69, True), (0.7, False)])
def test_uncertainty_is_audit_only(confidence, fires):
    out = rules.Uncertainty().apply(facts(), c("run", "leger", confidence))
    assert (out is not None) is fires
    assert out is None or out == c("run", "leger", confidence)


def test_founder_noise_with_attachments_becomes_a_question_only_when_authenticated():
    rule = rules.FounderFalseNoise()
    assert rule.apply(facts(from_founder=True, has_attachments=True), c()).intent == "question"
    assert rule.apply(facts(from_founder=True, has_attachments=False), c()) is None
    assert rule.apply(facts(from_founder=True, has_attachments=True, dkim_pass=False), c()) is None
    assert rule.apply(facts(from_founder=False, has_attachments=True), c()) is None


def test_paying_client_noise_is_never_silent_but_only_from_the_authenticated_envelope():
    rule = rules.PayingClientAntiSilence()
    assert rule.apply(facts(envelope_client=PAYING), c()).intent == "question"
    assert rule.apply(facts(envelope_client=TRIAL), c()) is None          # MRR 0
    assert rule.apply(facts(envelope_client=PAYING, dkim_pass=False), c()) is None
    assert rule.apply(facts(envelope_client=None), c()) is None            # body never counts


def test_existing_client_negociation_becomes_run_plan_but_conseil_stays():
    rule = rules.ExistingClientNotProspect()
    out = rule.apply(facts(envelope_client=TRIAL), c("negociation"))
    assert (out.intent, out.complexity) == ("run", "plan")
    assert rule.apply(facts(envelope_client=PAYING), c("conseil")) is None
    assert rule.apply(facts(envelope_client=None), c("negociation")) is None


def test_an_unauthenticated_existing_client_negociation_is_not_raised_to_a_run():
    """A forged envelope address of a client must not turn a prospect's negotiation into a
    run + plan for that client (rule 8 fires only on a DKIM-verified envelope)."""
    rule = rules.ExistingClientNotProspect()
    assert rule.apply(facts(envelope_client=PAYING, dkim_pass=False), c("negociation")) is None
    assert rule.apply(facts(envelope_client=PAYING, dkim_pass=True), c("negociation")).intent == "run"


def test_the_order_is_the_spec_order_and_names_are_unique():
    names = [r.name for r in rules.AFTER_LLM]
    assert names.index("confidence_floor_noise") < names.index("classification_uncertain") \
        < names.index("noise_override_founder_attachment") < names.index("noise_override_known_client") \
        < names.index("negociation_downgraded_existing_client")
    all_names = names + [r.name for r in rules.PRE_LLM]
    assert len(set(all_names)) == len(all_names)


# Killing the mutants that survived the first mutation run (docs/mutation.md): a rule that
# changes nothing must not fire (its name is an audit row), and a rule that raises noise to a
# question sets the complexity itself instead of trusting the rules before it.
@pytest.mark.parametrize("intent", ["question", "negociation", "conseil", "noise"])
def test_complexity_rule_does_not_fire_when_the_complexity_is_already_leger(intent):
    assert rules.ComplexityOnlyForRun().apply(facts(), c(intent, "leger")) is None
    assert rules.ComplexityOnlyForRun().apply(facts(), c(intent, "plan")).complexity == "leger"


def test_confidence_floor_does_not_fire_on_what_is_already_noise():
    assert rules.ConfidenceFloor().apply(facts(), c("noise", confidence=0.1)) is None


@pytest.mark.parametrize("rule,kw", [
    (rules.FounderFalseNoise(), dict(from_founder=True, has_attachments=True)),
    (rules.PayingClientAntiSilence(), dict(envelope_client=PAYING)),
])
def test_noise_raised_to_a_question_is_always_leger(rule, kw):
    out = rule.apply(facts(**kw), c("noise", "plan"))
    assert (out.intent, out.complexity) == ("question", "leger")


def test_any_confirmed_mrr_counts_even_one_euro():
    one = dataclasses.replace(PAYING, mrr=1.0)
    out = rules.PayingClientAntiSilence().apply(facts(envelope_client=one), c("noise"))
    assert out is not None and out.intent == "question"
