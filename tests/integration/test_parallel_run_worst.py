"""The parallel run's record holds the worst of each hour, not a sample (OPS-4; decision O22): a
45-minute delivery outage that lies between two hourly comparisons, over, with every event delivered,
when the next comparison samples, still fails the week's verdict (`msgx compare --summary --since
7d`), because the health tick (every 30 s) folded its reading into that hour's row as a maximum and
the next comparison records that worst. Real PostgreSQL and MariaDB, the real compare job."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import text

from msgx_dagster.jobs.compare import compare_job
from msgx_dagster.resources import MsgxResource
from msgx_engine.store import parallel_run
from tests.builders import gtdt
from tests.pipeline_support import drain_now

OUTAGE = timedelta(minutes=45)


def clean(compared: int = 1) -> dict:
    """A comparison as compare_job records it: nothing unexplained, nothing waiting when it sampled."""
    return {"code": 0, "unexplained": 0, "explained": 0, "missing_here": 0, "missing_there": 0, "differs": 0,
            "compared": compared, "scope": "live days", "not_compared": [], "fields": {},
            "dlq_backlog": 0, "oldest_dwell_s": 0.4}


def sql(app, statement: str):
    with app.engine.begin() as conn:
        return conn.execute(text(statement))


def test_a_45_minute_outage_between_two_hourly_samples_fails_the_week(env, cli_run, app):
    with app.engine.begin() as conn:        # a clean week: a comparison every hour, the last one an hour ago
        now = conn.execute(text("SELECT now()")).scalar_one()
        for hours in range(1, 7 * 24 + 1):
            parallel_run.record(conn, clean(), {"against": "postgresql+psycopg://ref/prod"},
                                at=now - timedelta(hours=hours))
    app.mailbox.put(gtdt("CA1234", (1, "A1")))
    drain_now(app)
    # Kafka has been down since 45 minutes after that comparison: the event waits unsent ...
    sql(app, f"UPDATE msg_event SET released_at = now() - interval '{OUTAGE.seconds} seconds' WHERE sent_at IS NULL")
    app.alerter().evaluate()             # ... and the health tick sees it (every 30 s under Dagster)
    sql(app, "UPDATE msg_event SET sent_at = now() WHERE sent_at IS NULL")     # Kafka is back, all delivered

    run = compare_job.execute_in_process(run_config={"ops": {"compare_op": {"config": {"against": env.db_url}}}},
                                         resources={"msgx": MsgxResource()})
    assert run.success
    with app.engine.connect() as conn:
        latest = parallel_run.runs_since(conn, now)[-1].figures
    assert latest["oldest_dwell_s"] >= OUTAGE.total_seconds() - 60 and latest["readings"] == 1, latest

    code, out, err = cli_run("compare", "--summary", "--since", "7d", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["verdict"] == "fail", out + err
    assert doc["figures"]["oldest_dwell_s_max"] >= OUTAGE.total_seconds() - 60
    assert any("oldest undelivered event waited" in r for r in doc["reasons"]), doc["reasons"]
    assert doc["basis"]["health_readings"] == 1 and doc["basis"]["comparisons"] >= 7 * 24
