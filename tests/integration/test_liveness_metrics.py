"""The liveness gauges of ``GET /metrics`` (OPS-2), read from the real PostgreSQL and MariaDB at
scrape time: the mailbox answered, its unregistered rows and their oldest age, the stall rule of the
pipeline_liveness check, and the time of the last health-check evaluation. A mailbox that cannot be
reached gives msgx_mailbox_up 0 and the rest of the scrape."""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from starlette.testclient import TestClient

from msgx_engine.http.app import create_app
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.monitor.metrics import metrics_renderer
from msgx_engine.store import locks, monitoring
from tests.builders import gtdt
from tests.private_servers import free_port


def scrape(app, mailbox: Mailbox | None) -> dict[str, float]:
    """GET /metrics over the app: {series name: value} of the unlabelled samples."""
    resp = TestClient(create_app(mailbox=app.mailbox, engine=app.engine,
                                 metrics=metrics_renderer(app.engine, "production", mailbox))).get("/metrics")
    assert resp.status_code == 200
    return {s.name: s.value for f in text_string_to_metric_families(resp.text) for s in f.samples if not s.labels}


def put_aged(app, n: int, age_s: float) -> None:
    stamp = (datetime.now() - timedelta(seconds=age_s)).replace(microsecond=0)
    for i in range(n):
        app.mailbox.put(gtdt(f"M{i}", (1, "A1")), received_at=stamp)


def test_waiting_rows_and_no_pump_show_as_a_stall(app):
    put_aged(app, 5, 95)
    m = scrape(app, app.mailbox)
    assert m["msgx_mailbox_up"] == 1 and m["msgx_database_up"] == 1
    assert m["msgx_mailbox_unregistered_rows"] == 5
    assert 90 <= m["msgx_mailbox_unregistered_oldest_age_seconds"] < 150
    assert m["msgx_pipeline_stalled"] == 1
    assert math.isnan(m["msgx_monitor_last_evaluation_timestamp_seconds"])     # never evaluated
    before = time.time()
    app.alerter().evaluate()
    m = scrape(app, app.mailbox)
    assert abs(m["msgx_monitor_last_evaluation_timestamp_seconds"] - before) < 30


def test_a_live_pump_clears_the_stall_gauge(app):
    put_aged(app, 2, 95)
    with app.engine.connect() as holder:
        assert holder.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": locks.PUMP}).scalar_one()
        holder.commit()
        with app.engine.begin() as conn:
            monitoring.beat(conn, monitoring.PUMP, pid=1, host="h", started=True)
        m = scrape(app, app.mailbox)
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": locks.PUMP})
        holder.commit()
    assert m["msgx_pipeline_stalled"] == 0 and m["msgx_mailbox_unregistered_rows"] == 2


def test_an_empty_mailbox_has_no_age(app):
    m = scrape(app, app.mailbox)
    assert (m["msgx_mailbox_unregistered_rows"], m["msgx_mailbox_unregistered_oldest_age_seconds"],
            m["msgx_pipeline_stalled"]) == (0, 0, 0)


def test_an_unreachable_mailbox_still_scrapes_with_mailbox_up_0(app):
    closed = Mailbox(f"mysql+pymysql://root@127.0.0.1:{free_port()}/nowhere")
    try:
        m = scrape(app, closed)
    finally:
        closed.dispose()
    assert m["msgx_mailbox_up"] == 0 and m["msgx_database_up"] == 1
    assert "msgx_mailbox_unregistered_rows" not in m and "msgx_queue_open_messages" in m
