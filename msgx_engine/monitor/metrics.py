"""``GET /metrics``: Prometheus text computed from PostgreSQL at scrape time (OPS-2).

A custom collector reads one ``Figures`` snapshot per scrape; there are no in-process counters, so
every ``msgx serve`` instance reports the same truth, a restart loses nothing, and the numbers are
the ones the health checks alert on. Most series are gauges of current state; every name starts
with ``msgx_``. The counters and latency histograms (messages ended, events delivered, requests
closed) are totals kept in PostgreSQL (``store.metric_totals``), added to by the transaction that
does the work, so they never go down, not on a restart and not when archiving moves rows; the
scrape reads them in one short query. ``msgx_build_info`` carries the installed version.

Projection drift needs Redis and a full comparison of every flight, too heavy for a scrape every
few seconds: it is exported as measured by the last health-check evaluation (``health_sensor``,
every 30 s), with that evaluation's time beside it. When PostgreSQL cannot be read the scrape still
answers, with ``msgx_database_up 0`` and the mode.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.monitor import names
from msgx_engine.monitor.checks import liveness
from msgx_engine.monitor.figures import UNREGISTERED_CAP, UNSUPPORTED_WINDOW, Figures, figures
from msgx_engine.store import metric_totals as mt
from msgx_engine.store.monitoring import PUMP
from msgx_engine.store.requests import OPEN as OPEN_REQUEST_STATES
from msgx_engine.store.requests import RequestStatus

log = logging.getLogger(__name__)


def _gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=math.nan if value is None else float(value))


def _labelled(name: str, doc: str, labels: list[str], rows: list[tuple[list[str], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _ts(dt) -> float | None:
    return dt.timestamp() if dt is not None else None


def figure_metrics(f: Figures) -> Iterator[Metric]:
    """The series of one snapshot (pure: tests and the collector share it)."""
    yield _gauge("msgx_queue_open_messages", "Registered messages not yet terminal (PENDING or FAILED).",
                 f.open_messages)
    yield _gauge("msgx_queue_head_id", "Mailbox id of the queue head (smallest open message); NaN when empty.",
                 f.head_id)
    yield _gauge("msgx_queue_head_age_seconds", "Seconds since the oldest open message was registered.",
                 f.head_age_s)
    yield _labelled("msgx_messages", "Messages in proc_state by status and reason (archived ones not counted).",
                    ["status", "reason"], [([s, r or ""], float(n)) for s, r, n in f.by_status_reason])
    yield _gauge("msgx_dead_letters", "Messages in status DEAD that no operator has acknowledged yet.", f.dead)
    yield _gauge("msgx_backfill_pending", "Mailbox processed-marks still to write.", f.backfill_pending)
    yield _gauge("msgx_backfill_oldest_age_seconds", "Seconds since the oldest pending mailbox mark was queued.",
                 f.backfill_age_s)
    yield _labelled("msgx_outbox_undelivered", "Released outbox events not yet delivered to Kafka, by topic.",
                    ["topic"], [([t], float(n)) for t, n in sorted(f.unsent_by_topic.items())])
    yield _gauge("msgx_outbox_oldest_undelivered_age_seconds",
                 "Seconds since the oldest undelivered event was released.", f.unsent_age_s)
    yield _gauge("msgx_outbox_dead_events", "Outbox events given up after their delivery attempts.", f.dead_events)
    yield _gauge("msgx_kafka_configured", "1 when this instance delivers to Kafka (MSGX_KAFKA_BOOTSTRAP set), else 0: "
                 "without Kafka released events stay pending by design.", 1.0 if f.kafka_configured else 0.0)
    yield _labelled("msgx_requests", "Requests to the AODB (req_track) by type and status.", ["rtype", "status"],
                    [([t, s], float(n)) for t, s, n in f.requests])
    yield _gauge("msgx_requests_open", "Requests REGISTERED or SENT and not yet answered.",
                 sum(n for _, s, n in f.requests if s in OPEN_REQUEST_STATES))
    yield _gauge("msgx_requests_timed_out", "Requests that ended TIMEOUT (no answer in time).",
                 sum(n for _, s, n in f.requests if s == RequestStatus.TIMEOUT))
    yield _gauge("msgx_unsupported_recent_messages",
                 f"Messages SKIPPED(unsupported) registered in the last {UNSUPPORTED_WINDOW.total_seconds():.0f} s.",
                 sum(n for _, n in f.unsupported_recent))
    yield _gauge("msgx_pump_lock_held", "1 when a pump holds the writer lock (a pump is running), else 0.",
                 1.0 if f.pump_lock_held else 0.0)
    beat = f.heartbeat(PUMP)
    yield _gauge("msgx_pump_last_heartbeat_timestamp_seconds",
                 "Unix time of the pump's last heartbeat (every ~10 s while it loops); NaN if it never ran.",
                 _ts(beat.beat_at) if beat else None)
    yield _gauge("msgx_pump_heartbeat_age_seconds", "Seconds since the pump's last heartbeat; NaN if it never ran.",
                 f.age_s(beat.beat_at) if beat else None)
    drift = f.alerts.get(names.PROJECTION_DRIFT)
    yield _gauge("msgx_projection_drift_flights",
                 "Flights differing between Redis flightInfo and PostgreSQL at the last health-check evaluation; "
                 "NaN when not measured.", drift.value if drift else None)
    yield _labelled("msgx_check_failing", "1 while a health check fails (as of its last scheduled evaluation).",
                    ["check"], [([n], 1.0 if a.failing else 0.0) for n, a in sorted(f.alerts.items())])
    yield _labelled("msgx_check_evaluated_timestamp_seconds", "Unix time of each health check's last evaluation.",
                    ["check"], [([n], a.evaluated_at.timestamp()) for n, a in sorted(f.alerts.items())])
    yield from liveness_metrics(f)


def liveness_metrics(f: Figures) -> Iterator[Metric]:
    """Is the pipeline alive: the mailbox side, the stall rule of the pipeline_liveness check (computed
    here from this scrape's figures, so it does not wait for an evaluation), and when the health
    checks were last evaluated (a monitor that stopped shows as a stale timestamp)."""
    if f.mailbox is not None:
        yield _gauge("msgx_mailbox_up", "1 when the mailbox answered this scrape, else 0.",
                     1.0 if f.mailbox.up else 0.0)
        if f.mailbox.up:
            yield _gauge("msgx_mailbox_unregistered_rows",
                         f"Mailbox rows waiting to be registered (counted up to {UNREGISTERED_CAP}).",
                         f.unregistered_rows)
            yield _gauge("msgx_mailbox_unregistered_oldest_age_seconds",
                         "Seconds since the oldest unregistered mailbox row was inserted; 0 when none.",
                         f.unregistered_age_s)
    yield _gauge("msgx_pipeline_stalled", "1 when work waits (mailbox rows, open messages, mailbox marks) and no "
                 "pump is alive, else 0 (also 0 while writes are stopped for a cut-over).",
                 1.0 if liveness(f).stalled else 0.0)
    yield from cutover_metrics(f)
    yield _gauge("msgx_monitor_last_evaluation_timestamp_seconds",
                 "Unix time of the newest health-check evaluation; NaN if the checks were never evaluated.",
                 _ts(f.last_evaluation_at))


def cutover_metrics(f: Figures) -> Iterator[Metric]:
    """Whether this installation gave up its writes for a cut-over, where and when: the Prometheus
    rules silence the stalled-pipeline, heartbeat and backlog alerts on it (no pump runs there by
    design), and a dashboard says why the installation is quiet."""
    stop = f.stop
    yield _gauge("msgx_cutover_writes_stopped", "1 while this installation's writes are stopped for a cut-over "
                 "(`msgx cutover stop-writes`, until resume or rollback): no pump runs here by design, else 0.",
                 1.0 if stop is not None else 0.0)
    yield _gauge("msgx_cutover_watermark", "The mailbox id at which writes were stopped for a cut-over; NaN while "
                 "writes are open or stop-writes is still draining.", stop.watermark if stop is not None else None)
    yield _gauge("msgx_cutover_stopped_timestamp_seconds", "Unix time writes were stopped for a cut-over; NaN while "
                 "writes are open.", _ts(stop.at) if stop is not None else None)


# --- durable counters and histograms, build info ---------------------------------------------------
_COUNTERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (mt.MESSAGES_TERMINAL, "Messages that reached a terminal status (SUCCEEDED, SKIPPED, DEAD), by TYPE, STYP "
     "and status (empty when the message could not be read). A replayed message that ends again is counted "
     "again. Kept in PostgreSQL: never lowered by archiving or a restart.", ("type", "styp", "status")),
    (mt.EVENTS_DELIVERED, "Outbox events acknowledged by Kafka, by topic (msg: change events, schd: whole "
     "states; one schd record may deliver several events). Kept in PostgreSQL.", ("topic",)),
    (mt.REQUESTS, "Requests to the AODB that ended, by kind (RQFD, RQRD) and outcome (DONE: answered, FAILED: "
     "answered with an error, TIMEOUT: no answer in time, EXPIRED: replaced by a newer request, SHADOW: "
     "recorded in shadow mode, never sent). Kept in PostgreSQL.", ("kind", "outcome")),
)
_HISTOGRAMS: tuple[tuple[str, str], ...] = (
    (mt.TERMINAL_LATENCY, "Seconds from a message's registration (msgx registers a mailbox row within a "
     "poll of its insert; the mailbox's own insert time is not read) to its terminal status. Kept in "
     "PostgreSQL."),
    (mt.DELIVERY_LATENCY, "Seconds from an event's release (its message's terminal status) to Kafka's "
     "acknowledgement of it. Kept in PostgreSQL."),
)


def _counter_name(name: str) -> str:
    return name.removesuffix("_total")


def total_metrics(totals: list[mt.Total]) -> Iterator[Metric]:
    """The counters and histograms of the stored totals (pure; every family is present, empty or
    all zero before anything was counted, so dashboards and alert rules find the names)."""
    by_name: dict[str, list[mt.Total]] = {}
    for t in totals:
        by_name.setdefault(t.name, []).append(t)
    for name, doc, labels in _COUNTERS:
        counter = CounterMetricFamily(_counter_name(name), doc, labels=list(labels))
        for t in by_name.get(name, []):
            counter.add_metric([t.labels.get(k, "") for k in labels], t.value)
        yield counter
    for name, doc in _HISTOGRAMS:
        counts = {t.labels.get("le", mt.INF): t.value for t in by_name.get(f"{name}_bucket", [])}
        bounds = sorted({*(mt.le_text(b) for b in mt.BUCKETS), *counts} - {mt.INF}, key=float)
        cumulative, buckets = 0.0, []
        for le in [*bounds, mt.INF]:
            cumulative += counts.get(le, 0.0)
            buckets.append((le, cumulative))
        total = sum(t.value for t in by_name.get(f"{name}_sum", []))
        yield HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


def build_info() -> Metric:
    """``msgx_build_info{version}`` = 1: which release is running (for dashboards and upgrades)."""
    try:
        installed = version("msgx")
    except PackageNotFoundError:
        installed = "unknown"
    info = InfoMetricFamily("msgx_build", "The msgx release this instance runs.")
    info.add_metric([], {"version": installed})
    return info


def durable_metrics(engine: Engine) -> Iterator[Metric]:
    """The stored totals, read in one short query; nothing when PostgreSQL cannot be read then."""
    try:
        with engine.connect() as conn:
            totals = mt.read_totals(conn)
    except SQLAlchemyError as exc:
        log.warning("metrics: totals unreadable: %s", exc.__class__.__name__)
        return
    yield from total_metrics(totals)


class MsgxCollector(Collector):
    """Reads PostgreSQL (and the mailbox, when given) once per scrape (see the module doc)."""

    def __init__(self, engine: Engine, mode: str, mailbox: Mailbox | None = None, *,
                 kafka_configured: bool = True) -> None:
        self.engine = engine
        self.mode = mode
        self.mailbox = mailbox
        self.kafka_configured = kafka_configured

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        info = InfoMetricFamily("msgx_mode", "The instance's mode (MSGX_MODE: production or shadow).")
        info.add_metric([], {"mode": self.mode})
        yield info
        yield build_info()
        try:
            snapshot = figures(self.engine, self.mailbox)
        except SQLAlchemyError as exc:
            log.warning("metrics: state database unreadable: %s", exc.__class__.__name__)
            snapshot = None
        yield _gauge("msgx_database_up", "1 when the state database answered this scrape.",
                     1.0 if snapshot is not None else 0.0)
        if snapshot is not None:
            yield from figure_metrics(replace(snapshot, kafka_configured=self.kafka_configured))
            yield from durable_metrics(self.engine)
        yield _gauge("msgx_scrape_duration_seconds", "Time this scrape spent reading PostgreSQL and the mailbox.",
                     time.monotonic() - started)


def metrics_renderer(engine: Engine, mode: str, mailbox: Mailbox | None = None, *, kafka_configured: bool = True):
    """A callable returning the Prometheus text for one scrape (the HTTP route calls it per request)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MsgxCollector(engine, mode, mailbox, kafka_configured=kafka_configured))

    def render() -> bytes:
        return generate_latest(registry)

    return render
