"""Every metric the shipped dashboard and alert rules name is one ``msgx serve`` exports (OPS-2).

The exported names come from a real scrape of ``GET /metrics`` of a ``msgx serve`` on this test's
PostgreSQL and MariaDB, not from a list kept by hand: a renamed or dropped series fails here before
an operator finds an empty panel or an alert that can never fire. A histogram's ``_bucket``/``_sum``/
``_count`` and a counter's ``_total`` count as their family.
"""

from __future__ import annotations

import urllib.request

from tests.http_support import serve_process
from tests.prometheus_support import (
    dashboard,
    dashboard_exprs,
    exported_names,
    is_exported,
    metric_names,
    rules,
    variable_queries,
)


def _scrape(env: dict[str, str]) -> str:
    with serve_process(env) as (port, _proc):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            assert resp.status == 200
            return resp.read().decode()


def test_dashboard_and_rules_name_only_exported_metrics(env_for) -> None:
    """OPS-2: the dashboard's expressions (panels and variables) and the alert rules' expressions and
    description queries read only series that `/metrics` exports."""
    exported = exported_names(_scrape(env_for()))
    assert "msgx_database_up" in exported and "msgx_queue_open_messages" in exported   # a real, full scrape

    doc = dashboard()
    dashboard_used = set().union(*(metric_names(e) for e in dashboard_exprs(doc) + variable_queries(doc)))
    rules_used = set().union(*(metric_names(r["expr"]) | metric_names(" ".join(r["annotations"].values()))
                               for r in rules()))
    assert len(dashboard_used) > 15 and len(rules_used) > 10

    assert not {n for n in dashboard_used if not is_exported(n, exported)}, sorted(exported)
    assert not {n for n in rules_used if not is_exported(n, exported)}, sorted(exported)
