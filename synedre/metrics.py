"""`synedre metrics`: a Prometheus endpoint for what Flower cannot see (issue 11, item 3).

Everything is read at scrape time from the fleet's own stores, so one endpoint anywhere
sees every worker on every machine, and nothing is kept in the workers:

- `synedre_messages{status}`: messages per status, every status, zero included;
- `synedre_queue_depth{queue}`: tasks waiting per stage queue, consumer or not;
- `synedre_spawn_paused`, `synedre_launch_slots_*`: the kill switch and the launch semaphore;
- `synedre_launches{status}`: launches by outcome (running, succeeded, failed, sandbox_unavailable, merge_failed);
- `synedre_spend_today_usd` against `synedre_daily_spend_cap_usd` (the view
  `synedre.spend_today` the cap reads: launches and agent asks, UTC day);
- `synedre_mailbox_login_failures_total{mailbox,cause}`: logins refused by a mailbox's IMAP
  or SMTP server, or by its OAuth2 token endpoint (cause `imap`, `smtp`, `token`), counted
  in Redis by whichever process was refused (synedre/mailboxes.py);
- `synedre_stage_duration_seconds{stage}`: a histogram of the time from a stage's claim
  to its write. Each stage write records `duration_s` in its audit row, computed by
  PostgreSQL (synedre/runner/doors.py, the stage runner); this process tails `audit_log` by id at
  each scrape and observes every new row once, so buckets, count and sum only grow, as
  a Prometheus histogram must (they start from zero when the endpoint starts).

The statuses, queue depths and switch come from the same functions as `synedre status`
(synedre/health/). A source that fails is reported by `synedre_source_up{source}` = 0
and its metrics are left out of that scrape; the scrape itself never fails.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from synedre.config import Settings, get_settings
from synedre.log import log
from synedre.pipeline import STAGES, LaunchStatus

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 9808
# From a clean scan (tens of ms) to an OCR or a classification retried for minutes.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 2400.0)
LAUNCH_STATUSES = tuple(str(s) for s in LaunchStatus)
# Stages that claim a message, hence write a duration (poll creates messages, claims none).
TIMED_STAGES = tuple(s.name for s in STAGES if s.entry)
# An audit id skipped by a scrape may belong to a transaction not yet committed (ids are
# taken in one order and committed in another): looked for again for this long. Stage
# writes are short transactions; a rolled-back id simply expires.
GAP_TTL_S = 120.0
TAIL_BATCH = 50_000


@dataclass
class _Histogram:
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    count: int = 0
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        for i, bound in enumerate(BUCKETS):
            if value <= bound:
                self.buckets[i] += 1


class StageDurations:
    """The stage histograms, fed from `audit_log` rows that carry `duration_s`, each row
    observed once: by id above the last seen, plus ids skipped earlier (gaps)."""

    def __init__(self, start_after: int | None = None):
        self.last_id = start_after  # None: begin at the newest row, replaying nothing
        self.gaps: dict[int, float] = {}  # audit id -> monotonic time first skipped
        self.by_stage = {name: _Histogram() for name in TIMED_STAGES}

    def feed(self, conn: Any) -> int:
        """Observe the rows written since the last call; returns how many were observed."""
        if self.last_id is None:
            row = conn.execute("SELECT coalesce(max(id), 0) AS id FROM synedre.audit_log").fetchone()
            self.last_id = int(row["id"])
            return 0
        now = time.monotonic()
        self.gaps = {i: t for i, t in self.gaps.items() if now - t < GAP_TTL_S}
        rows = conn.execute(
            "SELECT id, detail->>'stage' AS stage, detail->>'duration_s' AS duration_s"
            " FROM synedre.audit_log WHERE id > %s OR id = ANY(%s) ORDER BY id LIMIT %s",
            (self.last_id, list(self.gaps), TAIL_BATCH)).fetchall()
        observed = 0
        expected = self.last_id + 1
        for r in rows:
            rid = int(r["id"])
            if rid in self.gaps:
                del self.gaps[rid]
            elif rid > self.last_id:
                for missing in range(expected, rid):  # not visible yet, or rolled back
                    self.gaps.setdefault(missing, now)
                expected = rid + 1
                self.last_id = rid
            if r["duration_s"] is None or r["stage"] is None:
                continue
            try:
                value = float(r["duration_s"])
            except ValueError:
                continue
            self.by_stage.setdefault(r["stage"], _Histogram()).observe(value)
            observed += 1
        return observed

    def family(self) -> HistogramMetricFamily:
        fam = HistogramMetricFamily("synedre_stage_duration_seconds",
                                    "Time from a stage's claim to its write, per stage", labels=["stage"])
        for stage, h in self.by_stage.items():
            cumulative = [(_bound(b), float(n)) for b, n in zip(BUCKETS, h.buckets, strict=True)]
            fam.add_metric([stage], cumulative + [("+Inf", float(h.count))], h.total)
        return fam


def _bound(value: float) -> str:
    return repr(float(value))


def launch_counts(conn: Any) -> dict[str, int]:
    """Launches per status (outcome), every known status, zero included."""
    counts = dict.fromkeys(LAUNCH_STATUSES, 0)
    for r in conn.execute("SELECT status, count(*) AS n FROM synedre.launches GROUP BY status"):
        counts[r["status"]] = int(r["n"])
    return counts


def spend_today(conn: Any) -> float:
    """Everything paid since 00:00 UTC, launches and asks: the view the daily cap reads."""
    row = conn.execute("SELECT usd FROM synedre.spend_today").fetchone()
    return float(row["usd"])


def _gauge(name: str, doc: str, values: dict[str, float] | float, label: str | None = None) -> GaugeMetricFamily:
    if label is None:
        assert not isinstance(values, dict)
        return GaugeMetricFamily(name, doc, value=float(values))
    fam = GaugeMetricFamily(name, doc, labels=[label])
    assert isinstance(values, dict)
    for key, v in values.items():
        fam.add_metric([key], float(v))
    return fam


class FleetCollector(Collector):
    """Reads PostgreSQL and Redis at each scrape (scrapes are serialized)."""

    def __init__(self, settings: Settings | None = None, durations: StageDurations | None = None):
        self.settings = settings or get_settings()
        self.durations = durations or StageDurations()
        self._lock = threading.Lock()

    def collect_once(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._collect()

    def _collect(self) -> Iterator[Metric]:
        from synedre import db, health, kv, mailboxes
        from synedre.spawn import locks

        s = self.settings
        up: dict[str, float] = {"postgresql": 0.0, "redis": 0.0}
        out: list[Metric] = []
        try:
            with db.transaction() as conn:
                statuses = health.status_counts(conn)
                launches = launch_counts(conn)
                spend = spend_today(conn)
                self.durations.feed(conn)
            out += [
                _gauge("synedre_messages", "Messages per pipeline status", dict(statuses), "status"),
                _gauge("synedre_launches", "Launches per outcome (launches.status)", dict(launches), "status"),
                _gauge("synedre_spend_today_usd", "Spend since 00:00 UTC (launches and asks), in USD", spend),
            ]
            up["postgresql"] = 1.0
        except Exception as exc:  # a scrape reports the failure, it does not fail
            log.warning("metrics_source_failed", source="postgresql", error=type(exc).__name__)
        out.append(self.durations.family())
        out.append(_gauge("synedre_daily_spend_cap_usd", "Fleet-wide launch spend cap per UTC day, in USD",
                          s.daily_spend_cap_usd))
        try:
            r = kv.client()
            depths = health.queue_depths(r)
            paused = locks.spawn_disabled(r, s.spawn_disabled)
            in_use = locks.LaunchSemaphore(r, limit=s.max_concurrent_launches).in_use()
            out += [
                _gauge("synedre_queue_depth", "Tasks waiting in each stage queue, consumer or not",
                       dict(depths), "queue"),
                _gauge("synedre_spawn_paused", "1 when the launch kill switch is on", 1.0 if paused else 0.0),
                _gauge("synedre_launch_slots_in_use", "Fleet-wide launch slots held", in_use),
                _gauge("synedre_launch_slots_limit", "Fleet-wide launch slots", s.max_concurrent_launches),
            ]
            failures = CounterMetricFamily(
                "synedre_mailbox_login_failures", "Logins refused by a mailbox's IMAP or SMTP server or its"
                " OAuth2 token endpoint", labels=["mailbox", "cause"])
            for (box, cause), n in sorted(mailboxes.refusals().items()):
                failures.add_metric([box, cause], float(n))
            out.append(failures)
            up["redis"] = 1.0
        except Exception as exc:
            log.warning("metrics_source_failed", source="redis", error=type(exc).__name__)
        out.append(_gauge("synedre_source_up", "1 when the source answered this scrape", up, "source"))
        yield from out


def registry(settings: Settings | None = None) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    collector = FleetCollector(settings)
    collector.collect_once()  # the histograms begin at the newest audit row, now
    reg.register(collector)
    return reg


def serve(address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT) -> None:
    """Serve /metrics until interrupted."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=address, registry=registry())
    log.info("metrics_serving", address=address, port=port)
    try:
        while thread.is_alive():
            thread.join(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
