"""What `synedre status` shows and `synedre fleet` checks at start: messages per status,
queue depths read from Redis, the launch switch, and the health of every dependency.

Each check is bounded by a timeout and reports a readable reason; none raises.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from synedre.config import Settings, get_settings
from synedre.pipeline import STAGES, Status, queues

# kombu's Redis transport keeps a queue's priorities in separate lists: <name>, <name>\x06\x16<p>
_PRIORITY_SEP = "\x06\x16"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _timed(name: str, fn: Callable[[], str]) -> Check:
    started = time.monotonic()
    try:
        detail = fn()
        return Check(name, True, f"{detail} ({(time.monotonic() - started) * 1000:.0f} ms)")
    except Exception as exc:  # a check reports every failure; the reason is the point
        return Check(name, False, f"{type(exc).__name__}: {exc}"[:300])


def status_counts(conn: Any) -> dict[str, int]:
    """Messages per status: every status of the pipeline, zero included."""
    rows = conn.execute("SELECT status, count(*) AS n FROM synedre.email_states GROUP BY status").fetchall()
    counts = {str(s): 0 for s in Status}
    counts.update({r["status"]: r["n"] for r in rows})
    return counts


def queue_depths(r: Any) -> dict[str, int]:
    """Tasks waiting in each stage's queue, consumer or not (a cancelled consumer's queue
    still fills, and this is where it shows)."""
    out = {}
    for q in queues():
        keys = [q] + [k.decode() if isinstance(k, bytes) else k for k in r.scan_iter(f"{q}{_PRIORITY_SEP}*")]
        out[q] = sum(int(r.llen(k)) for k in keys)
    return out


def check_postgres() -> Check:
    def probe() -> str:
        from synedre import db

        with db.transaction() as conn:
            conn.execute("SELECT 1")
        return "reachable"
    return _timed("postgresql", probe)


def check_redis() -> Check:
    def probe() -> str:
        from synedre import kv

        r = kv.client()
        r.ping()
        info = cast(dict[str, Any], r.info())  # a sync client: the reply itself
        notes = []
        if info.get("maxmemory_policy") != "noeviction":
            notes.append(f"WARNING maxmemory-policy is {info.get('maxmemory_policy')}, not noeviction: "
                         "locks and queued tasks can be evicted")
        if not info.get("aof_enabled") and not _rdb_saves(r):
            notes.append("WARNING no persistence (AOF off, no RDB saves): a restart loses queued tasks")
        return "; ".join(["reachable", *notes])
    c = _timed("redis", probe)
    return Check(c.name, c.ok and "WARNING" not in c.detail, c.detail)


def _rdb_saves(r: Any) -> bool:
    try:
        return bool((r.config_get("save") or {}).get("save"))
    except Exception:  # CONFIG may be disabled on a managed Redis: assume it persists
        return True


def check_clamd(s: Settings) -> Check:
    def probe() -> str:
        from synedre.scan.clamd import ping

        if not ping(s.clamd, timeout=5.0):
            raise ConnectionError(f"clamd at {s.clamd} does not answer PING")
        return f"{s.clamd} answers"
    return _timed("clamd", probe)


def check_imap(s: Settings) -> list[Check]:
    from synedre import mailboxes

    try:
        boxes = mailboxes.load()
    except mailboxes.RegistryError as exc:
        return [Check("imap", False, str(exc))]

    def login(box: Any) -> Callable[[], str]:
        def probe() -> str:
            with box.session(s.imap_timeout_s) as client:
                client.select_folder(box.folder, readonly=True)
            return f"login as {box.username} on {box.imap_host}:{box.imap_port} ok"
        return probe
    return [_timed(f"imap:{box_id}", login(box)) for box_id, box in boxes.items()]


def check_llm_keys(s: Settings) -> list[Check]:
    """Per feature of the AI routing table: is there a key for at least one of its routes?
    (the facade skips a provider without a key; `local` needs none)."""
    from synedre import db

    try:
        with db.transaction() as conn:
            rows = conn.execute("SELECT feature, provider, fallbacks FROM synedre.ai_routing"
                                " ORDER BY feature").fetchall()
    except Exception as exc:
        return [Check("llm", False, f"routing table unreadable: {type(exc).__name__}")]
    out = []
    for r in rows:
        providers = [r["provider"], *[f.get("provider") for f in r["fallbacks"] or []]]
        keyed = [p for p in providers if p == "local" or s.resolve_key(p)[0] is not None]
        reasons = [why for p in providers if p != "local" and (why := s.resolve_key(p)[1])]
        out.append(Check(f"llm:{r['feature']}", bool(keyed),
                         f"served by {keyed[0]}" if keyed else "; ".join(reasons) or "no route"))
    return out


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


def check_all(s: Settings | None = None) -> list[Check]:
    s = s or get_settings()
    return [check_postgres(), check_redis(), check_clamd(s), *check_imap(s), *check_llm_keys(s),
            check_agent_sandbox(s)]


def snapshot(s: Settings | None = None, app: Any = None) -> dict[str, Any]:
    """Everything `synedre status` prints, as data (`app`: the Celery app, to ask consumers)."""
    from synedre import db, kv
    from synedre.spawn import locks

    s = s or get_settings()
    out: dict[str, Any] = {}
    try:
        with db.transaction() as conn:
            out["messages"] = status_counts(conn)
            out["waiting"] = {r["status"]: r["n"] for r in conn.execute(
                "SELECT status, count(*) AS n FROM synedre.email_states WHERE waiting_reason IS NOT NULL"
                " GROUP BY status")}
    except Exception as exc:
        out["messages"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    try:
        r = kv.client()
        out["queues"] = queue_depths(r)
        out["launches"] = {"paused": locks.spawn_disabled(r, s.spawn_disabled),
                           "slots_in_use": locks.LaunchSemaphore(r, limit=s.max_concurrent_launches).in_use(),
                           "limit": s.max_concurrent_launches}
    except Exception as exc:
        out["queues"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    if app is not None:
        out["consumers"] = queue_consumers(app)
    out["stages"] = [{"stage": st.name, "queue": st.queue, "group": st.group,
                      "entry": [str(x) for x in st.entry], "running": st.running and str(st.running),
                      "stuck_after_s": st.stuck_after_s} for st in STAGES]
    out["health"] = [c.__dict__ for c in check_all(s)]
    return out


def queue_consumers(app: Any, timeout_s: float = 1.0) -> dict[str, int] | None:
    """Workers consuming each queue, asked over the broker; None when no worker answered
    in time (then nobody consumes anything, or the broker is down)."""
    try:
        replies = app.control.inspect(timeout=timeout_s).active_queues() or {}
    except Exception:
        return None
    counts = {q: 0 for q in queues()}
    for worker_queues in replies.values():
        for q in worker_queues or []:
            counts[q["name"]] = counts.get(q["name"], 0) + 1
    return counts
