"""The fleet tells when a child restarts in a loop (SPEC §12 escalation), once the window fills."""
import os
import signal
import threading

import pytest

from synedre import fleet

pytestmark = pytest.mark.timeout(60)


def test_a_child_dying_over_and_over_is_reported_as_a_restart_loop():
    child = fleet.Child("crashy", ["/bin/false"])
    child.backoff = 0.01  # restart at once: the loop shows in a second, not in minutes
    reported = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    stopper = threading.Timer(10.0, lambda: os.kill(os.getpid(), signal.SIGTERM))
    stopper.start()
    try:
        assert fleet.supervise([child], dict(os.environ), grace_s=1,
                               on_restart_loop=lambda name, n, window: reported.append((name, n, window))) == 0
    finally:
        stopper.cancel()
        for s, h in previous.items():
            signal.signal(s, h)
    assert reported and reported[0] == ("crashy", fleet.RESTART_LOOP_COUNT, fleet.RESTART_LOOP_WINDOW_S)
