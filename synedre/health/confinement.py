"""Whether what runs confined can start so (SPEC §8 Sandbox, §9): the agent, `./deploy` and
QA's Chromium, each under its own user and sandbox."""
from __future__ import annotations

from synedre.config import Settings
from synedre.health.probe import Check


def check_agent_sandbox(s: Settings) -> Check:
    """Who the agent runs as and whether its sandbox can start (SPEC §8 Sandbox); the root
    opt-out (SYNEDRE_AGENT_AS_ROOT) is a warning while it is on."""
    import os

    from synedre.spawn import agent, sandbox

    try:
        run_as = agent.user(s)
    except (KeyError, ValueError) as exc:
        return Check("agent", False, f"agent user {s.agent_user!r} unavailable ({exc}): every launch fails")
    who = run_as.name if run_as else ("root" if os.geteuid() == 0 else "the worker's user")
    if unavailable := sandbox.preflight(os.environ.get("PATH", "/usr/bin:/bin"), run_as):
        return Check("agent", False, f"runs as {who}; sandbox unavailable: {unavailable}: every launch fails")
    detail = f"runs as {who}, sandboxed"
    if run_as is None and os.geteuid() == 0:
        detail += ("; WARNING SYNEDRE_AGENT_AS_ROOT is on: the agent runs as root, confined by the sandbox"
                   f" alone (unset it to run it as {s.agent_user})")
    return Check("agent", "WARNING" not in detail, detail)


def check_deploy_sandbox(s: Settings) -> Check:
    """Whether `./deploy` can run confined: as its own user, inside the sandbox runtime (a deploy
    that cannot is `deploy_failed`, never run unconfined)."""
    from synedre.orchestrate.deploy import Confinement, preflight

    if why := preflight(Confinement(s.deploy_sandbox, s.deploy_user)):
        return Check("deploy", False, f"{why}: every deploy fails")
    return Check("deploy", True, f"runs as {s.deploy_user} inside {s.deploy_sandbox}")


def check_qa_browser(s: Settings) -> Check:
    """Whether QA's Chromium can start confined (its sandbox on, never as root): what it would
    run as, or why every browser check would fail."""
    import os

    from synedre.orchestrate.browser import BrowserUnavailable, confinement

    try:
        confinement(s)
    except BrowserUnavailable as exc:
        return Check("browser", False, f"{exc}: every browser check fails")
    who = s.qa_user if os.geteuid() == 0 else "the worker's user"
    return Check("browser", True, f"Chromium runs as {who}, sandboxed")
