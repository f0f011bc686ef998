"""The durable totals as Prometheus families (pure: no server): keys, buckets, cumulation, names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from msgx_engine.monitor.metrics import build_info, total_metrics
from msgx_engine.store import metric_totals as mt


def test_labels_text_is_canonical_and_buckets_are_inclusive_upper_bounds():
    assert mt.labels_text({"type": "FLOP", "status": "SUCCEEDED", "styp": "GTDT"}) == (
        '{"status":"SUCCEEDED","styp":"GTDT","type":"FLOP"}')
    assert [mt.bucket_of(s) for s in (0.0, 0.005, 0.0051, 1.0, 299.0, 300.5)] == [
        "0.005", "0.005", "0.01", "1.0", "300.0", "+Inf"]


def test_deltas_aggregate_one_transaction_in_key_order():
    d = mt.Deltas().count(mt.REQUESTS, {"kind": "RQRD", "outcome": "TIMEOUT"})
    d.count(mt.REQUESTS, {"outcome": "TIMEOUT", "kind": "RQRD"}).observe(mt.TERMINAL_LATENCY, 0.2)
    d.observe(mt.TERMINAL_LATENCY, -1.0)          # a clock step backwards counts as zero, never negative
    assert d.rows() == [
        (f"{mt.TERMINAL_LATENCY}_bucket", '{"le":"0.005"}', 1.0),
        (f"{mt.TERMINAL_LATENCY}_bucket", '{"le":"0.25"}', 1.0),
        (f"{mt.TERMINAL_LATENCY}_count", "{}", 2.0),
        (f"{mt.TERMINAL_LATENCY}_sum", "{}", 0.2),
        (mt.REQUESTS, '{"kind":"RQRD","outcome":"TIMEOUT"}', 2.0)]
    assert not mt.Deltas()


class _Fixed(Collector):
    def __init__(self, totals: list[mt.Total]) -> None:
        self.totals = totals

    def collect(self):
        yield build_info()
        yield from total_metrics(self.totals)


def test_stored_totals_become_counters_and_cumulative_histograms():
    """Counters expose ``_total`` samples; a histogram's per-bucket counts are cumulated in bound
    order, a bound no longer configured still shows, ``+Inf`` equals the count."""
    bucket = f"{mt.DELIVERY_LATENCY}_bucket"
    totals = [mt.Total(mt.EVENTS_DELIVERED, {"topic": "msg"}, 7.0),
              mt.Total(bucket, {"le": "0.01"}, 3.0), mt.Total(bucket, {"le": "0.25"}, 2.0),
              mt.Total(bucket, {"le": "0.3"}, 1.0), mt.Total(bucket, {"le": "+Inf"}, 1.0),
              mt.Total(f"{mt.DELIVERY_LATENCY}_sum", {}, 400.5), mt.Total(f"{mt.DELIVERY_LATENCY}_count", {}, 7.0)]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(totals))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "# TYPE msgx_events_delivered_total counter" in text
    assert [(s.name, s.labels, s.value) for s in families["msgx_events_delivered"].samples] == [
        ("msgx_events_delivered_total", {"topic": "msg"}, 7.0)]
    hist = families[mt.DELIVERY_LATENCY]
    buckets = {s.labels["le"]: s.value for s in hist.samples if s.name.endswith("_bucket")}
    assert (buckets["0.005"], buckets["0.01"], buckets["0.25"], buckets["0.3"], buckets["0.5"]) == (0, 3, 5, 6, 6)
    assert buckets["+Inf"] == 7
    counts = [v for _, v in sorted(buckets.items(), key=lambda kv: float(kv[0]))]
    assert counts == sorted(counts)
    assert [s.value for s in hist.samples if s.name.endswith(("_count", "_sum"))] == [7.0, 400.5]
    assert families["msgx_requests"].samples == []          # present, nothing counted yet
    assert families["msgx_build_info"].samples[0].value == 1
