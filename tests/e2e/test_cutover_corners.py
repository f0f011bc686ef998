"""The cut-over's corners (OPS-4, PRE-1, OPS-3), on two installations with state databases of their
own, one MariaDB mailbox, the Kafka-wire broker and Redis: a rollback killed mid-replay publishes
nothing twice, a cut-over called off before any promote is resumed (and refused once another
installation took over), a production pump refuses a shadow's database, and dead events are shown
and must be accepted by their number before writes stop.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import Counter

from sqlalchemy import text

from msgx_engine.clock import DatabaseClock
from msgx_engine.db import make_engine
from msgx_engine.mailbox.lock import MailboxBusy, MailboxLock
from tests.conftest import MSGX_BIN
from tests.cutover_support import (  # noqa: F401 - run_as and two are fixtures
    DAY,
    both_drain,
    msg_events,
    ok,
    refused,
    run_as,
    scalar,
    signed,
    two,
)
from tests.e2e.test_shadow_start import state_checksum
from tests.pipeline_support import mailbox_checksum
from tests.refused_events import kill_events_for_real

SMALL = [DAY[i:i + 40] for i in range(0, 160, 40)]


def cutover_row(url: str) -> tuple | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT role, writes, watermark FROM cutover_state")).first()
            return None if row is None else tuple(row)
    finally:
        engine.dispose()


def locks_let_go(db_url: str, mailbox_url: str, within_s: float = 15.0) -> None:
    """After a killed command: wait until the servers dropped its sessions, so its advisory locks and
    the mailbox lock are free (polled with a deadline)."""
    deadline = time.monotonic() + within_s
    while scalar(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                         "(SELECT oid FROM pg_database WHERE datname = current_database())"):
        assert time.monotonic() < deadline, "the killed command's advisory locks stay held"
        time.sleep(0.1)
    while True:
        held = MailboxLock(mailbox_url)
        try:
            held.acquire()
            return
        except MailboxBusy:
            assert time.monotonic() < deadline, "the killed command's mailbox lock stays held"
            time.sleep(0.1)
        finally:
            held.dispose()


def unsent_of(url: str, ids: list[int]) -> int:
    return scalar(url, "SELECT count(*) FROM msg_event WHERE sent_at IS NULL AND msg_id = ANY(:ids)", ids=ids)


def test_ops4_a_rollback_killed_between_a_replay_commit_and_its_suppression_publishes_nothing_twice(
        app, two, run_as, kafka_reader):  # noqa: F811 - fixtures from tests.cutover_support
    """OPS-4, PRE-1: the rollback is killed (SIGKILL) right after its replay committed the promoted
    installation's rows, before their events were recorded as published. The record says a rollback
    is in progress: a dispatcher of the old installation publishes nothing and exits (3), its pump
    refuses; the same rollback run again suppresses those events and reopens writes. On the
    production ``msg`` topic every message's events appear exactly once overall."""
    a, b, b_live = two["a"], two["b"], two["b_live"]
    mailbox = app.mailbox
    first = mailbox.put_many(SMALL[0])
    both_drain(run_as, a)
    ok(run_as(b, *signed("shadow", "start-from", str(first[0]))))
    second = mailbox.put_many(SMALL[1])
    both_drain(run_as, a)
    ok(run_as(a, *signed("cutover", "stop-writes")))
    both_drain(run_as, b)
    ok(run_as(b_live, *signed("cutover", "promote", "--from", a["MSGX_DB_URL"])))
    third = mailbox.put_many(SMALL[2])
    both_drain(run_as, b_live)
    ok(run_as(b_live, *signed("cutover", "stop-writes")))

    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
    killed = subprocess.run([MSGX_BIN, *signed("cutover", "rollback", "--from", b["MSGX_DB_URL"])],
                            env={**env, **a, "MSGX_FAULT_STEP": "rollback_before_suppress"},
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    locks_let_go(a["MSGX_DB_URL"], a["MSGX_MAILBOX_URL"])
    assert cutover_row(a["MSGX_DB_URL"]) == ("production", "rolling_back", second[-1])
    at_risk = unsent_of(a["MSGX_DB_URL"], third)
    assert at_risk > 0, "the crash left no replayed event unsent: the test proves nothing"

    code, _, err = run_as(a, "dispatch", "--drain")
    assert code == 3 and "a rollback to this installation is in progress" in err, err
    assert unsent_of(a["MSGX_DB_URL"], third) == at_risk
    code, _, err = run_as(a, "pump", "--drain")
    assert code == 3 and "rollback" in err

    out = ok(run_as(a, *signed("cutover", "rollback", "--from", b["MSGX_DB_URL"])))
    assert f"{len(third)} row(s) brought over" in out
    assert cutover_row(a["MSGX_DB_URL"]) == ("production", "open", None)
    assert unsent_of(a["MSGX_DB_URL"], third) == 0
    fourth = mailbox.put_many(SMALL[3])
    both_drain(run_as, a)
    assert all(v is not None for v in mailbox.processed_at([*first, *second, *third, *fourth]).values())

    a_events, b_events = msg_events(a["MSGX_DB_URL"]), msg_events(b["MSGX_DB_URL"])
    expected = Counter({i: n for i, n in a_events.items() if i not in set(third)})
    expected.update({i: n for i, n in b_events.items() if i in set(third)})
    records = kafka_reader(a["MSGX_KAFKA_BOOTSTRAP"], a["MSGX_TOPIC_MSG"], sum(expected.values()))
    published = Counter(int(r.headers["msg_id"]) for r in records)
    assert published == expected, (published - expected, expected - published)
    assert set(third) & set(published)


def test_ops4_resume_reopens_writes_of_a_called_off_cut_over(app, two, run_as):  # noqa: F811
    """OPS-4, PRE-1: resume is refused where writes are open and while anybody holds the mailbox lock
    (exit 2, still stopped); after a stop-writes with no promote it reopens writes (audited) and the
    pump goes on from the watermark, marking what arrived meanwhile."""
    a = two["a"]
    mailbox = app.mailbox
    first = mailbox.put_many(SMALL[0])
    both_drain(run_as, a)
    refused(run_as(a, *signed("cutover", "resume")), "has not stopped writes")
    ok(run_as(a, *signed("cutover", "stop-writes")))
    second = mailbox.put_many(SMALL[1])
    other = MailboxLock(a["MSGX_MAILBOX_URL"])
    other.acquire()
    try:
        refused(run_as(a, *signed("cutover", "resume")), "another msgx installation")
    finally:
        other.dispose()
    assert cutover_row(a["MSGX_DB_URL"]) == ("production", "stopped", first[-1])

    out = ok(run_as(a, *signed("cutover", "resume")))
    assert f"no mailbox row after id {first[-1]} is marked" in out and "writes open again" in out
    assert cutover_row(a["MSGX_DB_URL"]) == ("production", "open", None)
    both_drain(run_as, a)
    assert all(v is not None for v in mailbox.processed_at([*first, *second]).values())
    assert scalar(a["MSGX_DB_URL"], "SELECT string_agg(action, ',' ORDER BY audit_id) FROM operator_audit") == \
        "cutover_stop_writes,cutover_resume"


def test_ops4_resume_is_refused_once_a_promoted_installation_marked_rows_after_the_watermark(
        app, two, run_as):  # noqa: F811
    """OPS-4, PRE-1: the shadow read on past production's watermark and was promoted, so it marked
    those rows: resume on the old installation is refused (exit 2, naming rollback as the way back)
    and changes nothing in its state database or the mailbox."""
    a, b, b_live = two["a"], two["b"], two["b_live"]
    mailbox = app.mailbox
    first = mailbox.put_many(SMALL[0])
    both_drain(run_as, a)
    ok(run_as(b, *signed("shadow", "start-from", str(first[0]))))
    ok(run_as(a, *signed("cutover", "stop-writes")))
    second = mailbox.put_many(SMALL[1])
    ok(run_as(b, "pump", "--drain"))
    ok(run_as(b_live, *signed("cutover", "promote", "--from", a["MSGX_DB_URL"])))
    assert all(v is not None for v in mailbox.processed_at(second).values())
    before = (state_checksum(a["MSGX_DB_URL"]), mailbox_checksum(mailbox.engine))
    err = refused(run_as(a, *signed("cutover", "resume")), "another installation took over")
    assert f"ids {second[0]} to {second[-1]}" in err and "msgx cutover rollback" in err
    assert (state_checksum(a["MSGX_DB_URL"]), mailbox_checksum(mailbox.engine)) == before


def test_ops3_a_production_pump_refuses_a_shadows_database_until_it_is_promoted(
        app, two, run_as, pg_dbs):  # noqa: F811
    """OPS-3, PRE-1: the first shadow pump records the shadow role (as does `msgx shadow start-from`
    before any pump); a production-mode pump on that database then exits (3) before it takes the
    mailbox lock or marks anything, saying what happened and to run promote."""
    b, b_live = two["b"], two["b_live"]
    mailbox = app.mailbox
    first = mailbox.put_many(SMALL[0])
    ok(run_as(b, "pump", "--drain"))
    assert cutover_row(b["MSGX_DB_URL"]) == ("shadow", "open", None)
    before = (state_checksum(b["MSGX_DB_URL"]), mailbox_checksum(mailbox.engine))
    code, _, err = run_as(b_live, "pump", "--drain")
    assert code == 3 and "this state database is a shadow's" in err and "msgx cutover promote" in err, err
    assert (state_checksum(b["MSGX_DB_URL"]), mailbox_checksum(mailbox.engine)) == before

    fresh = pg_dbs.fresh()
    ok(run_as({**b, "MSGX_DB_URL": fresh}, *signed("shadow", "start-from", str(first[0]))))
    assert cutover_row(fresh) == ("shadow", "open", None)
    code, _, err = run_as({**b_live, "MSGX_DB_URL": fresh}, "pump", "--drain")
    assert code == 3 and "this state database is a shadow's" in err
    assert all(v is None for v in mailbox.processed_at(first).values())


def kill_every_event(url: str, bootstrap: str) -> None:
    """Every released, unsent event dead-lettered by the dispatcher's own failure path (a refusal)."""
    engine = make_engine(url)
    try:
        kill_events_for_real(engine, DatabaseClock(engine), bootstrap)
    finally:
        engine.dispose()


def test_ops4_stop_writes_shows_dead_events_and_goes_on_only_with_their_number(app, two, run_as):  # noqa: F811
    """OPS-4, PRE-1: the first batch's events are dead and the second batch's events of the same
    flights wait behind them. stop-writes prints them prominently and refuses (exit 2, nothing
    changed) without --accept-dead N or with a wrong N; with the number it prints it stops,
    recording the dead events in the audit row; the stopped installation publishes nothing after."""
    a = two["a"]
    url = a["MSGX_DB_URL"]
    app.mailbox.put_many(SMALL[0])
    ok(run_as(a, "pump", "--drain"))
    kill_every_event(url, a["MSGX_KAFKA_BOOTSTRAP"])
    second = app.mailbox.put_many(SMALL[1])
    ok(run_as(a, "pump", "--drain"))
    dead = scalar(url, "SELECT count(*) FROM msg_event WHERE dead_at IS NOT NULL AND sent_at IS NULL")
    assert dead > 0

    code, out, err = run_as(a, *signed("cutover", "stop-writes"))
    found = re.search(r"ATTENTION: (\d+) event\(s\) will never be published: (\d+) dead", out)
    assert code == 2 and found is not None, (code, out, err)
    lost = int(found.group(1))
    assert int(found.group(2)) == dead and f"--accept-dead {lost}" in err
    unsent = scalar(url, "SELECT count(*) FROM msg_event WHERE sent_at IS NULL")
    assert lost == unsent > dead          # everything left after the drain: the dead and those held behind them
    assert cutover_row(url) is None
    refused(run_as(a, *signed("cutover", "stop-writes", "--accept-dead", str(lost - 1))), f"the number is now {lost}")
    assert cutover_row(url) is None

    out = ok(run_as(a, *signed("cutover", "stop-writes", "--accept-dead", str(lost))))
    assert f"writes stopped at mailbox id {second[-1]}" in out and "ATTENTION" in out
    outcome = json.loads(scalar(url, "SELECT outcome FROM operator_audit WHERE action = 'cutover_stop_writes'"))
    assert outcome["dead_events"] == dead and outcome["held_behind_dead"] == lost - dead
    code, _, err = run_as(a, "dispatch", "--drain")
    assert code == 3 and "writes are stopped on this installation" in err
    assert scalar(url, "SELECT count(*) FROM msg_event WHERE sent_at IS NULL") == unsent
