"""Durable counters and latency histograms of ``GET /metrics`` (OPS-2): kept in PostgreSQL's
``metric_total``, added to by the transaction that does the work, read back at scrape time.

Real PostgreSQL and MariaDB; the pump runs through every way it writes a terminal status (one
message per commit, a folded group with its write-behind, a two-transaction group), a real
``msgx pump --drain`` process exits before the scrape, and archiving runs for real."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from importlib.metadata import version

import pytest
from sqlalchemy import text

from msgx_engine.app import App
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.requests.tracker import RequestTracker
from msgx_engine.store import metric_totals, queue_figures
from tests.builders import envelope, gtdt
from tests.conftest import MSGX_BIN
from tests.metrics_support import TickingClock, histogram, scrape, values_of

TERMINAL = "msgx_messages_terminal"            # a counter family's name; its samples end in _total
LATENCY = "msgx_message_terminal_latency_seconds"


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock(datetime.now(UTC))


def mixed_day() -> list[str]:
    """Several TYPE/STYP and every terminal status: 3 FLOP/GTDT and one FLOP/FDEL SUCCEEDED, a
    duplicate SKIPPED, an ignored LDM SKIPPED, an unknown type SKIPPED(unsupported), a body that
    cannot be read DEAD (no TYPE or STYP known)."""
    first = gtdt("K1", (1, "A1"))
    return [first, gtdt("K2", (1, "A2")), first, gtdt("K1", (1, "B1")),
            envelope("FLOP", "FDEL", "\t<FLOP>\n\t\t<FLID>K2</FLID>\n\t\t<FDEL></FDEL>\n\t</FLOP>\n"),
            envelope("LDM", "LDMX", "\t<LDM/>\n"), envelope("ZZZZ", "XXXX", "\t<X/>\n"), "<MSG><META>"]


def by_labels(app: App) -> dict[tuple[str, str, str], float]:
    """What proc_state says ended, as (status, styp, type) -> count (the counter's label order)."""
    out: dict[tuple[str, str, str], float] = {}
    with app.engine.connect() as conn:
        for mtype, styp, status, _, n in queue_figures.outcome_counts(conn):
            key = (status, styp or "", mtype or "")
            out[key] = out.get(key, 0) + n
    return out


@pytest.mark.parametrize("path", ["one_per_commit", "folded_group", "two_transaction_group"])
def test_counters_and_latency_rise_by_type_styp_and_status(settings, clock, path):
    """OPS-2: after the pump, msgx_messages_terminal_total counts each message that ended by its
    TYPE, STYP and status, whichever statement wrote the status; the latency histogram observed
    every one of them (cumulative monotone buckets, count = messages ended, sum > 0)."""
    app = App.from_settings(replace(settings, split_transactions=path == "two_transaction_group"), clock=clock)
    try:
        for body in mixed_day():
            app.mailbox.put(body)
        group = 1 if path == "one_per_commit" else 64
        app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01, group_messages=group)).run()
        expected = by_labels(app)
        assert sum(expected.values()) == 8 and ("DEAD", "", "") in expected
        assert expected[("SUCCEEDED", "GTDT", "FLOP")] == 3 and expected[("SKIPPED", "GTDT", "FLOP")] == 1
        metrics = scrape(app.engine)
        family = metrics[TERMINAL]
        assert family.type == "counter"
        assert all(s.name == "msgx_messages_terminal_total" for s in family.samples)
        assert values_of(family, "_total") == expected
        _, total, count = histogram(metrics[LATENCY])
        assert count == 8 and total > 0
    finally:
        app.dispose()


def test_counters_survive_a_pump_process_exit_a_restart_and_archiving(app, settings, clock, env_for):
    """OPS-2: the totals are in PostgreSQL: a ``msgx pump --drain`` process counts and exits, a new
    App scrapes the same totals, a second process adds to them (never down), and archiving moves
    rows out of proc_state (the gauge of stored messages drops) without lowering a counter."""
    for body in mixed_day():
        app.mailbox.put(body)
    subprocess.run([MSGX_BIN, "pump", "--drain"], env=env_for(), check=True, capture_output=True, timeout=120)
    restarted = App.from_settings(settings, clock=clock)
    try:
        first = scrape(restarted.engine)
        counted = values_of(first[TERMINAL], "_total")
        assert sum(counted.values()) == 8 and counted == by_labels(restarted)
        app.mailbox.put(gtdt("K3", (1, "C1")))
        subprocess.run([MSGX_BIN, "pump", "--drain"], env=env_for(), check=True, capture_output=True, timeout=120)
        second = values_of(scrape(restarted.engine)[TERMINAL], "_total")
        assert second[("SUCCEEDED", "GTDT", "FLOP")] == counted[("SUCCEEDED", "GTDT", "FLOP")] + 1
        assert {k: v for k, v in second.items() if k != ("SUCCEEDED", "GTDT", "FLOP")} == {
            k: v for k, v in counted.items() if k != ("SUCCEEDED", "GTDT", "FLOP")}

        before = scrape(restarted.engine)
        clock.advance(3 * 86400)
        report = restarted.archiver().run(restarted.archive_policy(older_than=timedelta(days=1)))
        assert report.counts.get("proc_state", 0) >= 2     # the duplicate and the ignored message
        after = scrape(restarted.engine)
        stored = values_of(after["msgx_messages"], status="SKIPPED")
        assert sum(stored.values()) < sum(values_of(before["msgx_messages"], status="SKIPPED").values())
        assert values_of(after[TERMINAL], "_total") == second
        assert histogram(after[LATENCY]) == histogram(before[LATENCY])
    finally:
        restarted.dispose()


def test_request_outcomes_are_counted_when_requests_close(app, clock):
    """OPS-2: msgx_requests_total{kind, outcome} rises when a request ends: EXPIRED (superseded by a
    newer one), TIMEOUT (no answer in time), FAILED (an EROR answered it, in that message's own
    transaction)."""
    from tests.snapshot_builders import pump

    tracker = RequestTracker(app.engine, app.mailbox, clock)
    tracker.register_rqrd("GLST")
    tracker.register_rqrd("GLST")                          # the first one EXPIRED
    tracker.register_rqfd(datetime(2026, 9, 9), None)
    assert len(tracker.track().sent) == 2
    clock.advance(61)
    assert len(tracker.expire_timeouts()) == 2             # both TIMEOUT
    tracker.register_rqrd("AIRL")
    assert len(tracker.track().sent) == 1
    (m,) = pump(app, envelope("EROR", "NONE", "\t<EROR><MTYP>RQRD</MTYP><DESC>table locked</DESC></EROR>\n"))
    with app.engine.connect() as conn:
        answered = conn.execute(text("SELECT status FROM req_track WHERE answer_msg_id = :m"), {"m": m}).scalar()
    assert answered == "FAILED"
    family = scrape(app.engine)["msgx_requests"]
    assert family.type == "counter"
    assert values_of(family, "_total") == {("RQRD", "EXPIRED"): 1, ("RQFD", "TIMEOUT"): 1, ("RQRD", "TIMEOUT"): 1,
                                         ("RQRD", "FAILED"): 1}


def test_sql_and_python_write_the_same_series_key(app):
    """The status statement builds a series' labels in SQL, ``Deltas`` in Python: both must give
    the one canonical text (sorted keys, JSON escapes), or one series would split in two."""
    odd = 'A"\\é/'
    cte = metric_totals.terminal_cte("u")
    sql = (f"WITH u AS (SELECT 'DEAD'::text AS status, %(t)s::text AS msg_type, NULL::text AS msg_styp, "
           f"%(now)s::timestamptz - interval '2 seconds' AS created_at), {cte} SELECT 1")
    with app.engine.begin() as conn:
        conn.exec_driver_sql(sql, {"t": odd, "now": datetime.now(UTC)})
        metric_totals.add(conn, metric_totals.Deltas().count(
            metric_totals.MESSAGES_TERMINAL, {"type": odd, "styp": "", "status": "DEAD"}).observe(
            metric_totals.TERMINAL_LATENCY, 2.0))
    with app.engine.connect() as conn:
        totals = {(t.name, tuple(sorted(t.labels.items()))): t.value for t in metric_totals.read_totals(conn)}
    assert totals == {
        (metric_totals.MESSAGES_TERMINAL, (("status", "DEAD"), ("styp", ""), ("type", odd))): 2.0,
        (f"{LATENCY}_bucket", (("le", "2.5"),)): 2.0,
        (f"{LATENCY}_sum", ()): pytest.approx(4.0),
        (f"{LATENCY}_count", ()): 2.0}


def test_build_info_and_conventions_and_a_database_that_is_down(app):
    """``msgx_build_info{version}`` = 1 with the installed version; every durable series is
    present before anything is counted (counters empty, histograms zero) with Prometheus names
    (counters' samples end in _total); with PostgreSQL unreachable only the static series and
    ``msgx_database_up 0`` are served."""
    metrics = scrape(app.engine)
    assert values_of(metrics["msgx_build_info"]) == {(version("msgx"),): 1.0}
    for name in ("msgx_messages_terminal", "msgx_events_delivered", "msgx_requests"):
        assert metrics[name].type == "counter" and metrics[name].samples == []
    for name in (LATENCY, "msgx_event_delivery_latency_seconds"):
        buckets, total, count = histogram(metrics[name])
        assert (total, count) == (0, 0) and len(buckets) == len(metric_totals.BUCKETS) + 1
    from msgx_engine.db import make_engine

    dead = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")
    try:
        down = scrape(dead)
    finally:
        dead.dispose()
    assert values_of(down["msgx_database_up"]) == {(): 0.0}
    assert "msgx_build_info" in down and TERMINAL not in down and LATENCY not in down
