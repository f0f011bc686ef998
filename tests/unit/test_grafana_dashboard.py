"""The shipped Grafana dashboard (``deploy/grafana/msgx-dashboard.json``) as a document: it imports into
any Grafana (a Prometheus datasource variable, no hard-coded datasource UID) and shows what an
on-call engineer graphs (OPS-2). That every metric it names is one ``/metrics`` exports is proven
against a real scrape in ``tests/integration/test_dashboard_metrics.py``."""

from __future__ import annotations

from tests.prometheus_support import dashboard, dashboard_exprs, metric_names


def _panels(doc: dict) -> list[dict]:
    out: list[dict] = []
    for panel in doc["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def test_datasource_is_a_variable_never_a_fixed_uid() -> None:
    """Every panel and target reads Prometheus through the `datasource` variable, so the dashboard
    imports into any Grafana whatever its datasource is called."""
    doc = dashboard()
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    seen = 0
    for panel in _panels(doc):
        if panel["type"] == "row":
            continue
        for holder in [panel, *panel["targets"]]:
            assert holder["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            seen += 1
    assert seen > 20


def test_panels_show_throughput_latency_backlog_dead_letters_outbox_and_pump() -> None:
    """OPS-2: throughput by TYPE and status, p50/p99 of both latency histograms, the backlog
    (registered, unregistered, head age), dead letters, outbox lag per topic, the pump's heartbeat and
    the failing checks each have an expression on the dashboard."""
    exprs = dashboard_exprs(dashboard())
    joined = "\n".join(exprs)
    assert "sum by (type, status) (rate(msgx_messages_terminal_total" in joined
    for histogram in ("msgx_message_terminal_latency_seconds_bucket", "msgx_event_delivery_latency_seconds_bucket"):
        for q in ("0.5", "0.99"):
            assert any(f"histogram_quantile({q}," in e and histogram in e for e in exprs), (histogram, q)
    used = set().union(*(metric_names(e) for e in exprs))
    for name in ("msgx_queue_open_messages", "msgx_mailbox_unregistered_rows", "msgx_queue_head_age_seconds",
                 "msgx_mailbox_unregistered_oldest_age_seconds", "msgx_dead_letters", "msgx_outbox_undelivered",
                 "msgx_pump_heartbeat_age_seconds", "msgx_check_failing", "msgx_pipeline_stalled"):
        assert name in used, name
    assert any("by (topic)" in e and "msgx_outbox_undelivered" in e for e in exprs)


def test_panels_are_laid_out_without_overlap() -> None:
    """Grafana stacks overlapping panels unpredictably: each grid cell belongs to one panel, and ids
    are unique."""
    panels = _panels(dashboard())
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]
    assert len({p["id"] for p in panels}) == len(panels)
