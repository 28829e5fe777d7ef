"""The stage runner refuses, before it writes anything, a result the pipeline table does not allow."""
import pytest

from synedre import runner
from synedre.db.launches import LaunchClaim
from synedre.pipeline import BY_NAME, LaunchStatus, Status

pytestmark = pytest.mark.unit
NO_DATABASE = None  # every refusal below happens before the connection is touched


def claim(stage: str) -> runner.Claim:
    return runner.Claim(BY_NAME[stage], 1, 1, {})


@pytest.mark.parametrize("stage, status", [("scan", Status.ACTIONED), ("ocr", Status.SCANNED),
                                           ("classify", Status.MATERIALIZED), ("recap", Status.QA_FAILED),
                                           ("deploy", Status.SPAWNED)])
def test_a_claimed_stage_cannot_end_outside_its_exits(stage, status):
    with pytest.raises(ValueError, match=f"stage {stage} cannot end in {status}"):
        runner.settle(NO_DATABASE, claim(stage), runner.Done(status))


def test_a_claimed_stage_must_write_a_result():
    with pytest.raises(TypeError, match="stage qa claimed message 1: a Skip writes nothing"):
        runner.settle(NO_DATABASE, claim("qa"), runner.Skip("nothing"))


def test_the_unclaimed_doors_check_where_the_message_is_and_where_it_goes():
    route, spawn = BY_NAME["qa_route"], BY_NAME["spawn"]
    with pytest.raises(ValueError, match="stage qa_route cannot end in actioned"):
        runner.move(NO_DATABASE, route, 1, runner.Done(Status.ACTIONED), at=Status.QA)
    with pytest.raises(ValueError, match="stage spawn does not take a message at deployed"):
        runner.move(NO_DATABASE, spawn, 1, runner.Done(Status.ESCALATED), at=Status.DEPLOYED)
    with pytest.raises(ValueError, match="stage spawn cannot end in deployed"):
        runner.finish_launch(NO_DATABASE, LaunchClaim(1, 1, 1), runner.Done(Status.DEPLOYED),
                             outcome=LaunchStatus.SUCCEEDED, reason="result")
    with pytest.raises(ValueError, match="stage poll cannot end in scanned"):
        runner.admit(NO_DATABASE, 1, Status.SCANNED, None)


def test_the_audit_event_is_the_status_unless_the_stage_names_another():
    assert runner.Done(Status.SCANNED).audit_event == "scanned"
    assert runner.Done(Status.QA_FAILED, "deploy_failed").audit_event == "deploy_failed"
