"""One probe's report (`Check`), and running probes at once within a bound (`bounded`)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

# `synedre status` answers within this (plus its start), whatever hangs: a compose
# healthcheck or a monitor gets its exit code in time.
PROBES_BOUND_S = 8.0


class NotReady(Exception):
    """A probe's own finding (no database, migrations pending), said as the operator needs it."""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    @property
    def level(self) -> Literal["ok", "warning", "fail"]:
        """A warning works but is configured at a risk (it says WARNING); a failure does not work."""
        return "ok" if self.ok else "warning" if "WARNING" in self.detail else "fail"


def bounded(probes: dict[str, Callable[[], Any]], bound_s: float = PROBES_BOUND_S) -> dict[str, Any]:
    """Each probe's result (or the exception it raised), all run at once on daemon threads;
    one still running after `bound_s` is a TimeoutError and is left behind."""
    results: dict[str, Any] = {}

    def run(name: str, probe: Callable[[], Any]) -> None:
        try:
            results[name] = probe()
        except Exception as exc:  # the caller reports it
            results[name] = exc
    threads = [threading.Thread(target=run, args=item, daemon=True) for item in probes.items()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + bound_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return {name: results.get(name, TimeoutError(f"no answer within {bound_s:.0f} s")) for name in probes}


def timed(name: str, fn: Callable[[], str], check: str = "") -> Check:
    """The probe's answer with its time, or its failure in one line with what to `check`."""
    started = time.monotonic()
    try:
        detail = fn()
        return Check(name, True, f"{detail} ({(time.monotonic() - started) * 1000:.0f} ms)")
    except NotReady as exc:  # already in the operator's words
        return Check(name, False, str(exc))
    except Exception as exc:  # a check reports every failure; the reason is the point
        return Check(name, False, f"{type(exc).__name__}: {one_line(exc)}"[:300] + check)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, NotReady) else f"{type(exc).__name__}: {one_line(exc)}"[:300]
