"""What `synedre status` shows and `synedre fleet` checks at start: messages per status,
queue depths read from Redis, the launch switch, and the health of every dependency.

Every probe runs at once, all of them within `probe.PROBES_BOUND_S`; each reports a readable
reason and none raises.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from synedre.config import Settings, get_settings
from synedre.health.confinement import check_agent_sandbox, check_deploy_sandbox, check_qa_browser
from synedre.health.probe import Check, NotReady, bounded, one_line, reason, timed
from synedre.pipeline import STAGES, Status, queues

# kombu's Redis transport keeps a queue's priorities in separate lists: <name>, <name>\x06\x16<p>
_PRIORITY_SEP = "\x06\x16"


def missing_database(s: Settings) -> str | None:
    """Why there is no database to use without creating one: the embedded server has never
    been created under the state directory (a command run with another one, or before the
    first `synedre db upgrade`)."""
    from synedre import db

    pgdata = db.embedded_pgdata(s)
    if s.database_url or (pgdata / "PG_VERSION").exists():
        return None
    return (f"no database in {pgdata} (SYNEDRE_STATE_DIR={s.state_dir}): `synedre db upgrade` creates it;"
            " or point SYNEDRE_STATE_DIR at the existing one, or SYNEDRE_DATABASE_URL at a server")


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


def check_postgres(s: Settings | None = None) -> Check:
    """Reachable (a connection of its own: no pool to wait for) and migrated."""
    s = s or get_settings()

    def probe() -> str:
        import psycopg

        from synedre import db
        from synedre.db.migrate import available

        if why := missing_database(s):
            raise NotReady(why)
        with db.connect() as conn:
            try:
                applied = {r["version"] for r in conn.execute("SELECT version FROM synedre.schema_migrations")}
            except psycopg.errors.UndefinedTable:
                applied = set()
        if pending := [m.version for m in available(s.migrations_dir) if m.version not in applied]:
            raise NotReady(f"reachable, {len(pending)} migration(s) pending: run `synedre db upgrade`")
        return "reachable, schema up to date"
    return timed("postgresql", probe, "; check that it runs, and SYNEDRE_DATABASE_URL")


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
    c = timed("redis", probe, "; start it, or fix SYNEDRE_BROKER_URL")
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
    return timed("clamd", probe, "; check that clamd runs, and SYNEDRE_CLAMD")


def check_imap(s: Settings) -> list[Check]:
    from synedre import mailboxes

    try:
        boxes = mailboxes.load()
    except mailboxes.RegistryError as exc:
        return [Check("imap", False, str(exc))]

    def login(box: Any) -> Callable[[], str]:
        def probe() -> str:
            try:
                with box.session(s.imap_timeout_s) as client:
                    client.select_folder(box.folder, readonly=True)
            except mailboxes.LoginRefused as exc:  # already one line: the mailbox, the server, its answer
                raise NotReady(f"{exc}{_cannot_send(box)}") from None
            how = " (OAuth2)" if box.oauth2 is not None else ""
            return f"login as {box.username} on {box.imap_host}:{box.imap_port} ok{how}"
        return probe
    return [timed(f"imap:{box_id}", login(box), f"; check the server, and the entry and credentials of {box_id}"
                   f" in SYNEDRE_MAILBOXES_FILE{_cannot_send(box)}") for box_id, box in boxes.items()]


def _cannot_send(box: Any) -> str:
    """What else fails with a mailbox the founder's mail leaves from."""
    if not box.smtp_host:
        return ""
    return f"; alerts and recaps to the founder leave from {box.id}: they cannot be sent"


def check_llm_keys(s: Settings) -> list[Check]:
    """Per feature of the AI routing table: is there a key for at least one of its routes?
    (the facade skips a provider without a key; `local` needs none)."""
    from synedre import db

    if missing_database(s):
        return [Check("llm", False, "routing table unreadable: no database")]
    try:
        with db.connect() as conn:
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


# Each provider's probe answers within this, so that all of them fit in PROBES_BOUND_S.
PROVIDER_PROBE_S = 5.0


def provider_probes(s: Settings) -> dict[str, Callable[[], list[Check]]]:
    """One probe per LLM provider that has a key: its cheapest authenticated call, for real
    (the models list, free of charge), so that a refused key or a misspelt server URL fails
    here rather than in the first message. The agent's API (Anthropic: every launch needs it)
    is probed too, and without a key it fails."""
    import importlib

    from synedre.ai.providers import PROVIDERS

    out: dict[str, Callable[[], list[Check]]] = {}
    for name, provider in PROVIDERS.items():
        if provider.url_variable is None:  # `local` needs no server
            continue
        why = s.resolve_key(name)[1]
        if why is None:
            # The SDK's import is CPU, not the network: on a loaded machine it alone could
            # outlast the probes' bound, so it happens here, before the clock starts.
            importlib.import_module(provider.sdk)
            out[f"api:{name}"] = partial(_provider_rows, s, provider)
        elif name == "anthropic":
            out[f"api:{name}"] = partial(list, [Check("api:anthropic", False, f"{why}: every launch fails"
                                                      " (the agent's CLI needs it)")])
    return out


def _provider_rows(s: Settings, provider: Any) -> list[Check]:
    return [check_provider(s, provider)]


def check_provider(s: Settings, provider: Any) -> Check:
    """The provider's answer to its probe, or why it failed in words: the key refused, no such
    API at that URL (and the form the URL takes), unreachable, or silent."""
    from urllib.parse import urlsplit

    u = urlsplit(provider.base_url(s) or "")
    where = f"{u.scheme}://{u.hostname}{f':{u.port}' if u.port else ''}{u.path}"  # never a userinfo
    key_var = f"SYNEDRE_{provider.name.upper()}_API_KEY"
    started = time.monotonic()
    try:
        n = provider.probe(PROVIDER_PROBE_S, settings=s)
    except Exception as exc:
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            why = f"the key is refused (HTTP {status}) at {where}: check {key_var}"
        elif status == 404:
            why = (f"no such API at {where} (HTTP 404 for its models list): check {provider.url_variable},"
                   f" {provider.url_form}")
        elif status is not None:
            why = f"HTTP {status} at {where}: {one_line(exc)[:200]}"
        elif "timeout" in type(exc).__name__.lower() or "timed out" in str(exc).lower():
            why = f"no answer within {PROVIDER_PROBE_S:.0f} s at {where}: check {provider.url_variable}"
        else:
            why = f"unreachable at {where} ({type(exc).__name__}: {one_line(exc)[:150]}): check {provider.url_variable}"
        return Check(f"api:{provider.name}", False, why)
    return Check(f"api:{provider.name}", True, f"{where} accepts the key ({n} models listed)"
                 f" ({(time.monotonic() - started) * 1000:.0f} ms)")


def check_all(s: Settings | None = None) -> list[Check]:
    """Every dependency's check, all at once, within PROBES_BOUND_S."""
    s = s or get_settings()
    return _checks(bounded(_check_probes(s)))


def _check_probes(s: Settings) -> dict[str, Callable[[], Any]]:
    return {"postgresql": lambda: [check_postgres(s)], "redis": lambda: [check_redis()],
            "clamd": lambda: [check_clamd(s)], "imap": lambda: check_imap(s), "llm": lambda: check_llm_keys(s),
            **provider_probes(s), "agent": lambda: [check_agent_sandbox(s)],
            "deploy": lambda: [check_deploy_sandbox(s)], "browser": lambda: [check_qa_browser(s)]}


# What `snapshot` probes beside the checks.
_NOT_CHECKS = ("messages", "queues", "consumers")


def _checks(results: dict[str, Any]) -> list[Check]:
    """Every check's rows, in the probes' order; one that raised or ran out of time, failed."""
    out: list[Check] = []
    for name, got in results.items():
        if name not in _NOT_CHECKS:
            out += [Check(name, False, reason(got))] if isinstance(got, Exception) else got
    return out


def snapshot(s: Settings | None = None, app: Any = None) -> dict[str, Any]:
    """Everything `synedre status` prints, as data (`app`: the Celery app, to ask consumers),
    every probe at once within PROBES_BOUND_S."""
    s = s or get_settings()
    probes = {**_check_probes(s), "messages": lambda: _messages(s), "queues": lambda: _queues(s)}
    if app is not None:
        probes["consumers"] = lambda: queue_consumers(app)
    got = bounded(probes)
    out: dict[str, Any] = {}
    for part in ("messages", "queues"):
        if isinstance(got[part], Exception):
            out[part] = {"error": reason(got[part])}
        else:
            out.update(got[part])
    if app is not None:
        out["consumers"] = None if isinstance(got["consumers"], Exception) else got["consumers"]
    out["stages"] = [{"stage": st.name, "queue": st.queue, "group": st.group,
                      "entry": [str(x) for x in st.entry], "running": st.running and str(st.running),
                      "stuck_after_s": st.stuck_after_s} for st in STAGES]
    out["health"] = [{**c.__dict__, "level": c.level} for c in _checks(got)]
    return out


def _messages(s: Settings) -> dict[str, Any]:
    from synedre import db

    if why := missing_database(s):
        raise NotReady(why)
    from synedre.db.messages import dkim_counts

    with db.connect() as conn:
        return {"messages": status_counts(conn), "waiting": {r["status"]: r["n"] for r in conn.execute(
            "SELECT status, count(*) AS n FROM synedre.email_states WHERE waiting_reason IS NOT NULL"
            " GROUP BY status")}, "dkim": dkim_counts(conn)}


def _queues(s: Settings) -> dict[str, Any]:
    from synedre import kv
    from synedre.spawn import locks

    r = kv.client()
    return {"queues": queue_depths(r),
            "launches": {"paused": locks.spawn_disabled(r, s.spawn_disabled),
                         "slots_in_use": locks.LaunchSemaphore(r, limit=s.max_concurrent_launches).in_use(),
                         "limit": s.max_concurrent_launches}}


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
