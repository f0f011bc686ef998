"""Archiving (US-11 AC1-AC4, INV-25, FS §3.6/§7, D2, D26, D31): what moves, what stays, crashes
between batches, deduplication afterwards, the flight and ledger purges.

Messages are processed with the ManualClock (registered 2026-01-01); ``msgx archive`` runs as
the console script with the database's clock, so they are months old to it. Where a test needs
exact times (flight purges, ledgers) it drives ``Archiver`` with the ManualClock instead.
"""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta

from builders import envelope, flop, gtdt
from snapshot_builders import day_package
from sqlalchemy import text

from msgx_engine.operations.acknowledge import acknowledge
from msgx_engine.operations.archive import ArchivePolicy, Archiver
from msgx_engine.pipeline.intake import Intake
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store import audit, outbox
from tests.conftest import MSGX_BIN
from tests.fault_support import fault_fixture, sql  # noqa: F401  (the `fault` fixture)
from tests.pipeline_support import drain_now, proc

ONLINE = ("proc_state", "proc_state_hst", "msg_event", "backfill_todo")


def msgx(env_for, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([MSGX_BIN, *args], env=env_for(**env), capture_output=True, text=True, timeout=300)


def deliver_all(app) -> None:
    """What the dispatcher does on a delivery report (Kafka is not part of these tests)."""
    with app.engine.begin() as conn:
        ids = [r[0] for r in conn.execute(text("SELECT event_id FROM msg_event WHERE released_at IS NOT NULL"))]
        outbox.mark_sent(conn, ids, datetime.now(UTC))


def ids_in(app, table: str) -> set[int]:
    return {r[0] for r in sql(app, f"SELECT msg_id FROM {table}")}


def count(app, table: str, where: str = "true") -> int:
    return sql(app, f"SELECT count(*) FROM {table} WHERE {where}")[0][0]


def test_archive_moves_only_finished_messages_with_history_and_events(app, env_for, fault):
    """US-11 AC1-AC3, INV-25: SUCCEEDED/SKIPPED/DEAD (acknowledged) messages whose marks are written
    and events delivered move, column for column, with their history and events; an open (FAILED) message,
    one with an undelivered event and one whose mark is still owed stay. A second run finds
    nothing; the counts are printed and audited; the mailbox is untouched."""
    done = app.mailbox.put(gtdt("AR1", (1, "A1")))
    bad = app.mailbox.put("<MSG>broken")
    ignored = app.mailbox.put(envelope("LDM", "NONE", "<LDM/>\n"))
    drain_now(app)
    deliver_all(app)
    undelivered = app.mailbox.put(gtdt("AR2", (1, "B1")))
    drain_now(app)
    owed = app.mailbox.put(envelope("RSTA", "NONE", "<RSTA/>\n"))
    fault("AR3")
    failing = app.mailbox.put(gtdt("AR3", (1, "C1")))
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01, inline_backfill=False)).run()   # mark owed
    assert proc(app, failing).status == "FAILED" and count(app, "backfill_todo", f"msg_id = {owed}") == 1
    # a dead letter waits for an operator until acknowledged (OPS-2; kept otherwise: test_acknowledge.py)
    acknowledge(app.engine, [bad], operator="alice", reason="malformed, nothing to replay", now=app.clock.now())
    before = {m: sql(app, "SELECT * FROM proc_state WHERE msg_id = :m", m=m)[0] for m in (done, bad, ignored)}
    events_before = sql(app, f"SELECT * FROM msg_event WHERE msg_id = {done} ORDER BY event_id")
    history_before = sql(app, f"SELECT * FROM proc_state_hst WHERE msg_id = {done} ORDER BY id")
    mailbox_before = sql_mailbox(app)

    dry = msgx(env_for, "archive", "--older-than", "0s", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    # the dry run says its cutoff and what holds finished messages back, with counts (OPS-2)
    assert dry.stdout.startswith("cutoff: finished messages registered before ")
    assert "held 1 message(s) whose events are not delivered to Kafka yet" in dry.stdout
    assert "held 1 message(s) whose mailbox mark is not written yet" in dry.stdout
    assert ids_in(app, "proc_state") == {done, bad, ignored, undelivered, owed, failing}

    run = msgx(env_for, "archive", "--older-than", "0s")
    assert run.returncode == 0, run.stderr
    assert ids_in(app, "proc_state") == {undelivered, owed, failing}
    assert ids_in(app, "proc_state_archive") == {done, bad, ignored}
    for m, row in before.items():
        archived = sql(app, "SELECT * FROM proc_state_archive WHERE msg_id = :m", m=m)[0]
        assert {k: archived._mapping[k] for k in row._mapping} == dict(row._mapping)   # column for column, by name
        assert archived.mark_status == "DONE" and archived.marked_at is not None
    assert sql(app, f"SELECT * FROM msg_event_archive WHERE msg_id = {done} ORDER BY event_id") == events_before
    assert sql(app, f"SELECT * FROM proc_state_hst_archive WHERE msg_id = {done} ORDER BY id") == history_before
    assert count(app, "msg_event", f"msg_id = {undelivered}") == 2 and count(app, "backfill_todo") == 2
    counts = table_counts(run.stdout)
    assert counts["proc_state"] == 3 and counts["msg_event"] == 2 and counts["proc_state_hst"] == 3
    assert table_counts(dry.stdout) == counts, "the dry run promised other counts"
    assert sql_mailbox(app) == mailbox_before
    with app.engine.connect() as conn:
        [entry] = audit.entries(conn, action="archive")
    assert entry.outcome["proc_state"] == 3 and entry.outcome["msg_event"] == 2

    again = msgx(env_for, "archive", "--older-than", "0s")
    assert again.returncode == 0 and "archived or removed 0 row(s)" in again.stdout
    assert ids_in(app, "proc_state_archive") == {done, bad, ignored}


def table_counts(stdout: str) -> dict[str, int]:
    """The per-table counts ``msgx archive`` prints."""
    lines = stdout.splitlines()
    lines = lines[next(i for i, x in enumerate(lines) if x.startswith("table")) + 1:]
    rows = [line.rsplit(None, 1) for line in lines[:next(i for i, x in enumerate(lines) if " row(s) in " in x)]]
    return {name.strip(): int(n) for name, n in rows if int(n)}


def sql_mailbox(app) -> list:
    with app.mailbox.engine.connect() as conn:
        return conn.execute(text("SELECT * FROM cminmsgs ORDER BY CMINMSGS_ID")).fetchall()


def test_crash_between_or_inside_batches_then_rerun_converges(app, env_for):
    """US-11 AC3: each batch is one transaction; killed inside a batch nothing of it is kept, killed
    between batches the committed ones stay archived; a rerun finishes, every message exactly once."""
    ids = [app.mailbox.put(envelope("LDM", "NONE", "<LDM/>\n")) for _ in range(7)]
    drain_now(app)
    inside = msgx(env_for, "archive", "--older-than", "0s", "--batch", "2",
                  MSGX_FAULT_STEP="archive_inside_batch:1")
    assert inside.returncode == -9
    assert ids_in(app, "proc_state") == set(ids) and ids_in(app, "proc_state_archive") == set()
    between = msgx(env_for, "archive", "--older-than", "0s", "--batch", "2",
                   MSGX_FAULT_STEP="archive_between_batches:2")
    assert between.returncode == -9
    assert ids_in(app, "proc_state_archive") == set(ids[:4]) and ids_in(app, "proc_state") == set(ids[4:])
    rerun = msgx(env_for, "archive", "--older-than", "0s", "--batch", "2")
    assert rerun.returncode == 0, rerun.stderr
    assert ids_in(app, "proc_state") == set()
    assert sorted(r[0] for r in sql(app, "SELECT msg_id FROM proc_state_archive")) == ids
    assert count(app, "proc_state_hst_archive") == 7 and count(app, "proc_state_hst") == 0


def test_dedupe_after_archiving(app, clock, env_for):
    """US-11 AC3, INV-2b, D26: an archived mailbox id is never registered again (a row unmarked by
    someone, a full scan); a message inside the identity window is not archived, so its
    duplicate is still SKIPPED(duplicate) and the same identity with another payload still
    SKIPPED(identity_conflict), with no business effect; past the window the same identity is a
    new message."""
    old_body = gtdt("DD1", (1, "A1"))
    old = app.mailbox.put(old_body)
    drain_now(app)
    deliver_all(app)
    clock.advance((datetime.now(UTC) - timedelta(hours=1) - clock.now()).total_seconds())
    recent_body = gtdt("DD2", (1, "B1"))
    recent = app.mailbox.put(recent_body)
    drain_now(app)
    deliver_all(app)
    run = msgx(env_for, "archive", "--older-than", "0s")
    assert run.returncode == 0, run.stderr
    assert ids_in(app, "proc_state_archive") == {old} and ids_in(app, "proc_state") == {recent}

    with app.mailbox.engine.begin() as conn:
        conn.execute(text("UPDATE cminmsgs SET CMINMSGS_DATE_PROCESSED = NULL WHERE CMINMSGS_ID = :m"), {"m": old})
    dup_recent = app.mailbox.put(recent_body)
    seqn = int(re.search(r"<SEQN>(\d+)</SEQN>", recent_body).group(1))
    conflict = app.mailbox.put(gtdt("DD2", (1, "B9"), seqn=seqn))
    again_old = app.mailbox.put(old_body)
    with app.engine.connect() as conn:
        Intake(app.mailbox, app.clock).scan(conn, force_full=True)
        conn.commit()
    drain_now(app)
    assert old not in ids_in(app, "proc_state") and count(app, "intake_gap") == 0
    row = proc(app, dup_recent)
    assert (row.status, row.reason, row.dup_of) == ("SKIPPED", "duplicate", recent)
    assert (proc(app, conflict).status, proc(app, conflict).reason) == ("SKIPPED", "identity_conflict")
    assert sql(app, "SELECT gate FROM flight_gate WHERE flid = 'DD2'") == [("B1",)]
    assert proc(app, again_old).status == "SUCCEEDED"


def test_flights_retired_purged_and_old_ledgers_removed(app, clock):
    """FS §7, D31, D2, FS §3.6: an unowned FDAY NULL row idle for 7 days is retired (deleted with a
    released tombstone); a soft-deleted flight older than 7 days whose tombstone was delivered is
    removed with its details, one whose tombstone is undelivered stays; ledgers older than 30
    days go, a live day's ledger and member list stay (its diff-delete still works)."""
    orphan = app.mailbox.put(gtdt("ORPH1", (1, "A1")))
    old_day = app.mailbox.put(day_package(["SEP1", "SEP2"], day=9, month=9))
    drain_now(app)
    app.mailbox.put(flop("FDEL", "SEP1", "<FDEL/>"))
    app.mailbox.put(flop("FDEL", "SEP2", "<FDEL/>"))
    drain_now(app)
    with app.engine.begin() as conn:           # SEP1's tombstone delivered, SEP2's not
        ids = [r[0] for r in conn.execute(text(
            "SELECT event_id FROM msg_event WHERE flid <> 'SEP2' AND released_at IS NOT NULL"))]
        outbox.mark_sent(conn, ids, clock.now())
    live_day = app.mailbox.put(day_package(["OCT1", "OCT2"], day=28, month=10))
    drain_now(app)
    assert proc(app, orphan).status == proc(app, old_day).status == proc(app, live_day).status == "SUCCEEDED"

    clock.advance((datetime(2026, 11, 5, tzinfo=UTC) - clock.now()).total_seconds())
    report = Archiver(app.engine, clock).run(ArchivePolicy(older_than=timedelta(days=400)))
    assert report.counts["flight_schd retired"] == 1 and report.counts["flight_schd purged"] == 1
    flights = {r.flid: r for r in sql(app, "SELECT flid, deleted, state_version, fday FROM flight_schd")}
    assert set(flights) == {"ORPH1", "SEP2", "OCT1", "OCT2"}
    assert flights["ORPH1"].deleted and flights["ORPH1"].state_version == 2
    assert count(app, "flight_gate", "flid = 'SEP1'") == 0 and count(app, "flight_gate", "flid = 'ORPH1'") == 1
    tomb = sql(app, "SELECT msg_id, kind, state_version, released_at FROM msg_event WHERE flid = 'ORPH1' "
                    "ORDER BY event_id DESC LIMIT 1")[0]
    assert (tomb.msg_id, tomb.kind, tomb.state_version) == (0, "tombstone", 2) and tomb.released_at is not None
    days = [str(r[0]) for r in sql(app, "SELECT fday FROM schd_gen ORDER BY fday")]
    assert days == ["2026-10-28"] and count(app, "schd_gen_flid", "fday = '2026-09-09'") == 0
    assert count(app, "schd_gen_flid", "fday = '2026-10-28'") == 2

    gone = app.mailbox.put(day_package(["OCT1"], day=28, month=10))
    drain_now(app)
    assert proc(app, gone).status == "SUCCEEDED"
    assert sql(app, "SELECT deleted FROM flight_schd WHERE flid = 'OCT2'")[0][0] is True


def test_identity_bindings_past_the_window_go_but_a_backlog_keeps_its_own(app, clock):
    """D26, US-11, INV-9: archiving removes the identity bindings a window old, so `msg_identity`
    does not keep a row per message ever processed; but while an older message still waits to be
    processed (a backlog after an outage longer than the window), the bindings within a window of
    it stay, so its duplicate is still SKIPPED(duplicate). The dry run counts what would go."""
    first_body = gtdt("IB1", (1, "A1"))
    first = app.mailbox.put(first_body)
    drain_now(app)
    clock.advance(2 * 3600)
    waiting_dup = app.mailbox.put(first_body)           # registered 2 h later, not processed yet
    with app.engine.connect() as conn:
        Intake(app.mailbox, app.clock).scan(conn)
        conn.commit()
    assert proc(app, waiting_dup).status == "PENDING"
    clock.advance(3 * 86400)
    policy = ArchivePolicy(older_than=timedelta(days=400))
    report = Archiver(app.engine, clock).run(policy)
    assert report.counts.get("msg_identity", 0) == 0 and count(app, "msg_identity") == 1
    drain_now(app)
    row = proc(app, waiting_dup)
    assert (row.status, row.reason, row.dup_of) == ("SKIPPED", "duplicate", first)

    assert Archiver(app.engine, clock).run(policy, dry_run=True).counts["msg_identity"] == 1
    report = Archiver(app.engine, clock).run(policy)
    assert report.counts["msg_identity"] == 1 and count(app, "msg_identity") == 0


def test_the_report_names_its_cutoff_and_the_identity_window_holding_messages(app, clock):
    """US-11, D26, OPS-2: with a retention shorter than the identity window the cutoff is the window's,
    and the report (dry run and run alike) says so and counts the finished, delivered messages the
    window holds back, instead of printing zeros with no reason."""
    done = app.mailbox.put(gtdt("HW1", (1, "A1")))
    drain_now(app)
    deliver_all(app)
    clock.advance(2 * 3600)
    policy = ArchivePolicy(older_than=timedelta(hours=1), identity_window=timedelta(hours=24))
    for dry in (True, False):
        report = Archiver(app.engine, clock).run(policy, dry_run=dry)
        lines = report.lines()
        cutoff = clock.now() - timedelta(hours=24)
        assert lines[0] == (f"cutoff: finished messages registered before {cutoff:%Y-%m-%d %H:%M:%S %Z} "
                            "(the identity window 1 day, longer than the retention 1 hour)")
        assert report.held == {"identity_window": 1, "undelivered": 0, "mark_owed": 0}
        assert any(line.startswith("held 1 finished message(s) past the retention but inside the identity "
                                   "window") for line in lines)
    assert ids_in(app, "proc_state") == {done}
