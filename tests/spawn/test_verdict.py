"""The launch's verdict (SPEC §8: never trust the exit code alone), each refusal on its own."""
import pytest

from synedre.spawn.launcher import RunOutcome
from synedre.spawn.stream import parse_event
from synedre.stages.spawn.verdict import LaunchVerdict, succeeded

pytestmark = pytest.mark.unit


def outcome(exit_code=0, **result) -> RunOutcome:
    raw = {"type": "result", "subtype": "success", "is_error": False, "num_turns": 5, "duration_ms": 10,
           "total_cost_usd": 0.01, "usage": {}, "session_id": "s", "permission_denials": [], "result": "done",
           **result}
    return RunOutcome(exit_code, "result", "s", parse_event(raw), 10, 0, 1.0)


def test_a_clean_result_with_a_valid_contract_succeeds():
    assert succeeded(outcome(), 40, True) == LaunchVerdict(True, "success")


def test_a_result_flagged_as_an_error_fails_even_with_exit_0_and_subtype_success():
    assert succeeded(outcome(is_error=True), 40, True) == LaunchVerdict(False, "API error: done")
    refused = outcome(is_error=True, api_error_status=401, result="Invalid API key · Fix external API key")
    assert succeeded(refused, 40, True) == \
        LaunchVerdict(False, "authentication: Invalid API key · Fix external API key")


def test_a_result_that_is_not_a_success_fails():
    assert succeeded(outcome(subtype="error_max_turns"), 40, True) == \
        LaunchVerdict(False, "result:error_max_turns:is_error=False")


def test_a_run_over_its_turn_cap_fails_though_the_cli_called_it_a_success():
    assert succeeded(outcome(num_turns=41), 40, True) == LaunchVerdict(False, "turn_cap_exceeded")
    assert succeeded(outcome(num_turns=40), 40, True) == LaunchVerdict(True, "success")  # at the cap: fine
    assert succeeded(outcome(num_turns=500), None, True) == LaunchVerdict(True, "success")  # uncapped


def test_no_result_at_all_fails_with_the_stop_reason():
    none = RunOutcome(0, "exited", None, None, 3, 0, 1.0)
    assert succeeded(none, 40, True) == LaunchVerdict(False, "exited")


def test_a_permission_denial_fails_a_run_that_otherwise_succeeded():
    denied = outcome(permission_denials=[{"tool_name": "Write", "tool_input": {"file_path": "/etc/x"}}])
    assert succeeded(denied, 40, True) == LaunchVerdict(False, "permission_denials")
    assert succeeded(denied, None, True) == LaunchVerdict(False, "permission_denials")


def test_a_contract_found_in_the_commits_fails_even_when_it_validates():
    assert succeeded(outcome(), 40, True, contract_committed=True) == LaunchVerdict(False, "contract_committed")


def test_an_invalid_contract_fails_a_clean_result():
    assert succeeded(outcome(), 40, False) == LaunchVerdict(False, "invalid_contract")
    assert succeeded(outcome(), None, False) == LaunchVerdict(False, "invalid_contract")


def test_a_result_without_a_turn_count_is_within_any_cap():
    # The CLI omits num_turns on some results; an unknown count is not a count over the cap.
    assert succeeded(outcome(num_turns=None), 0, True) == LaunchVerdict(True, "success")
    assert succeeded(outcome(num_turns=0), 0, True) == LaunchVerdict(True, "success")
    assert succeeded(outcome(num_turns=1), 0, True) == LaunchVerdict(False, "turn_cap_exceeded")


@pytest.mark.parametrize("kind", ["is_error", "denied", "over_cap", "committed", "invalid"])
def test_every_refusal_is_a_failure_of_the_message(kind):
    """Whatever the reason, a refused verdict fails the message: it is never merged."""
    args = {"is_error": (outcome(is_error=True), 40, True, False),
            "denied": (outcome(permission_denials=[{"tool_name": "Bash"}]), 40, True, False),
            "over_cap": (outcome(num_turns=41), 40, True, False),
            "committed": (outcome(), 40, True, True),
            "invalid": (outcome(), 40, False, False)}[kind]
    v = succeeded(*args)
    assert v.ok is False and v.message_status != LaunchVerdict(True, "success").message_status
