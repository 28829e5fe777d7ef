"""A launch's API failure in words (issue 27): the pinned CLI's own error line, classified.
The raw results are the pinned CLI's (2.1.332), against a local API answering each error."""
import pytest

from synedre.spawn import failure

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

SELECTED = ("There's an issue with the selected model (claude-sonnet-5-5). It may not exist or you may not have"
            " access to it. Run --model to pick a different model.")
RESULTS = {
    "model not found": {"api_error_status": 404, "api_error_type": "not_found_error", "result": SELECTED},
    "authentication": {"api_error_status": 401, "api_error_type": "authentication_error",
                       "result": "Invalid API key · Fix external API key"},
    "rate limit": {"api_error_status": 429, "api_error_type": "rate_limit_error",
                   "result": "API Error: Request rejected (429) · Number of requests has exceeded your rate limit"},
    "overloaded": {"api_error_status": 529, "api_error_type": "overloaded_error",
                   "result": "API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again"
                             " in a moment. If it persists, check your inference gateway (127.0.0.1:39495)."},
    "credit": {"api_error_status": 400, "api_error_type": "invalid_request_error",
               "result": "Credit balance is too low"},
    "network": {"result": "API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)"},
    "timeout": {"result": "API Error: Request timed out."},
    "API error": {"api_error_status": 500, "api_error_type": "api_error", "result": "API Error: 500 Internal"},
}


@pytest.mark.parametrize("kind", list(RESULTS))
def test_each_failure_is_named_in_words_with_the_clis_own_line(kind):
    raw = {"type": "result", "subtype": "success", "is_error": True, **RESULTS[kind]}
    assert failure.kind(raw) == kind
    assert failure.reason(raw) == f"{kind}: {RESULTS[kind]['result']}"


def test_the_reason_is_one_bounded_line():
    raw = {"api_error_status": 429, "result": "line one\nline two " + "x" * 1000}
    line = failure.reason(raw)
    assert "\n" not in line and len(line) == failure.MAX_CHARS and line.startswith("rate limit: line one line two")
    assert failure.reason({"api_error_status": 503}) == "API error: HTTP 503"
