"""Shared by the durable-metrics tests: a clock that moves, and ``/metrics`` read back through
prometheus-client's own parser."""

from __future__ import annotations

from datetime import datetime, timedelta

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from msgx_engine.clock import ManualClock
from msgx_engine.monitor.metrics import metrics_renderer


class TickingClock(ManualClock):
    """A ManualClock that moves ``tick_s`` forward at every reading, so a latency measured
    between two readings (registration, terminal status, acknowledgement) is never zero."""

    def __init__(self, start: datetime | None = None, tick_s: float = 0.001) -> None:
        super().__init__(start)
        self.tick = timedelta(seconds=tick_s)

    def now(self) -> datetime:
        self._now += self.tick
        return self._now


def scrape(engine: Engine, mode: str = "production") -> dict[str, Metric]:
    """One scrape of the collector ``GET /metrics`` serves, parsed: {family name: family}."""
    text = metrics_renderer(engine, mode)().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def values_of(family: Metric, suffix: str = "", **fixed: str) -> dict[tuple[str, ...], float]:
    """{label values (sorted by label name, ``fixed`` ones left out): value} of the samples
    named family name + ``suffix`` whose labels include ``fixed``."""
    out = {}
    for s in family.samples:
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in fixed.items()):
            out[tuple(v for k, v in sorted(s.labels.items()) if k not in fixed)] = s.value
    return out


def histogram(family: Metric) -> tuple[list[tuple[float, float]], float, float]:
    """(cumulative buckets as (le, count) in le order, sum, count); asserts the exposition's shape:
    a histogram, buckets monotone, the ``+Inf`` bucket equal to the count."""
    assert family.type == "histogram", family.type
    buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket"))
    (total,) = [s.value for s in family.samples if s.name.endswith("_sum")]
    (count,) = [s.value for s in family.samples if s.name.endswith("_count")]
    counts = [c for _, c in buckets]
    assert counts == sorted(counts), f"buckets not cumulative: {buckets}"
    assert buckets[-1] == (float("inf"), count)
    return buckets, total, count
