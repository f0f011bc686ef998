"""Dead letters in detail (OPS-2): the dead_letters check lists the 20 oldest waiting dead letters
with TYPE/STYP, reason and an error excerpt, and names the commands that preview a replay and close
one; acknowledged ones leave the count (check, /metrics, the sensor's backlog) and the
unsupported-types check. Messages made dead by the real pipeline on PostgreSQL and MariaDB."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from starlette.testclient import TestClient

from msgx_engine.clock import ManualClock
from msgx_engine.http.app import create_app
from msgx_engine.monitor import backlog
from msgx_engine.monitor.metrics import metrics_renderer
from msgx_engine.store.tables import ATTENTION_WHERE
from tests.builders import envelope, gtdt
from tests.pipeline_support import drain_now


@pytest.fixture
def clock() -> ManualClock:
    """Registration times near PostgreSQL's clock (the unsupported window is measured against it)."""
    return ManualClock(datetime.now(UTC))


def acknowledge(app, *ids: int) -> None:
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE proc_state SET acknowledged_at = now(), acknowledged_by = 'ops' "
                          "WHERE msg_id = ANY(:ids)"), {"ids": list(ids)})


def dead_letters_gauge(app) -> float:
    resp = TestClient(create_app(mailbox=app.mailbox, engine=app.engine,
                                 metrics=metrics_renderer(app.engine, "production", app.mailbox))).get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    return families["msgx_dead_letters"].samples[0].value


def test_the_20_oldest_waiting_dead_letters_are_listed_with_reasons(app):
    """25 malformed messages end DEAD; two are acknowledged: 23 wait, the 20 oldest unacknowledged are
    listed with their reason and an error excerpt of at most 120 characters, plus the commands."""
    ids = [app.mailbox.put(f"<MSG><META><TYPE>FLOP</TYPE>{i}") for i in range(25)]
    app.mailbox.put(gtdt("D1", (1, "A1")))
    drain_now(app)
    acknowledge(app, ids[0], ids[3])
    r = app.check("dead_letters")
    assert not r.passed and r.value == 23 and r.metadata["dead"] == 23
    waiting = [i for i in ids if i not in (ids[0], ids[3])]
    assert [row["mailbox_id"] for row in r.rows] == waiting[:20]
    assert all(row["reason"] == "malformed" and 0 < len(str(row["error"])) <= 120 for row in r.rows)
    assert f"the 20 oldest: {waiting[0]} ?/? malformed: " in r.summary
    assert "`msgx replay --status DEAD`" in r.summary
    assert "`msgx acknowledge ID… --operator NAME --reason TEXT`" in r.summary
    assert r.metadata["oldest_ids"] == ", ".join(str(i) for i in waiting[:20])
    assert dead_letters_gauge(app) == 23
    assert backlog(app.engine, app.mailbox).dead == 23
    acknowledge(app, *waiting)
    assert app.check("dead_letters").passed and dead_letters_gauge(app) == 0


def test_acknowledged_unsupported_messages_leave_the_unsupported_check(app):
    unknown = app.mailbox.put(envelope("ZZZZ", "XXXX", "\t<X/>\n"))
    drain_now(app)
    r = app.check("unsupported_types")
    assert not r.passed and "ZZZZ-XXXX ×1" in r.summary
    assert "`msgx replay --status SKIPPED --select-reason unsupported`" in r.summary
    acknowledge(app, unknown)
    assert app.check("unsupported_types").passed


def test_the_dead_letter_reads_use_the_attention_index(app):
    """The count and the listing name the partial index's conditions, so PostgreSQL can answer them
    from proc_state_attention_idx rather than the whole table."""
    with app.engine.begin() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(text(
            "EXPLAIN SELECT msg_id FROM proc_state WHERE status = 'DEAD' AND acknowledged_at IS NULL "
            "ORDER BY msg_id LIMIT 20")))
    assert "proc_state_attention_idx" in plan, plan
    assert "acknowledged_at IS NULL" in ATTENTION_WHERE
