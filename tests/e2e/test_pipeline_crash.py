"""Crash matrix: ``msgx pump --drain`` in a subprocess over 1,000 mailbox rows is SIGKILLed
at each protocol step by MSGX_FAULT_STEP, then restarted. Proves US-03 AC6, INV-17b, INV-20b,
INV-8, US-09 AC2, C-15: every row terminal exactly once, flight state equal to a crash-free
reference run, no message's events duplicated, every mark written."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter

import pytest
from sqlalchemy import select, text

from msgx_engine.db import make_engine
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.mailbox.tables import cminmsgs
from msgx_engine.store.tables import detail_tables, flight_schd, msg_event, proc_state, proc_state_hst
from tests.builders import envelope, gtdt
from tests.conftest import MSGX_BIN
from tests.recovery import recovery

N = 1000


def workload() -> list[str]:
    """GTDT over 40 flights with fixed SEQNs, plus duplicates, conflicts, ignored and malformed rows."""
    out: list[str] = []
    for i in range(N):
        if i % 97 == 5:
            out.append(out[i - 3])                                            # duplicate resend
        elif i % 101 == 7:
            out.append(envelope("LDM", "NONE", "<X/>\n", seqn=900000 + i))   # ignored
        elif i % 211 == 9:
            out.append("<MSG><META>broken")                                   # malformed
        else:
            out.append(gtdt(f"CR{i % 40:02d}", (1, f"G{i % 13}"), (2, f"H{i % 7}"), seqn=800000 + i))
    return out


def fill(mailbox_url: str, bodies: list[str]) -> None:
    mb = Mailbox(mailbox_url)
    with mb.engine.begin() as conn:
        conn.execute(cminmsgs.insert(), [{"CMINMSGS_CLOB_MSG": b, "CMINMSGS_STATUS": "VALID"} for b in bodies])
    mb.dispose()


def env(db_url: str, mailbox_url: str, home, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
    e.update(MSGX_DB_URL=db_url, MSGX_MAILBOX_URL=mailbox_url, MSGX_HOME=str(home), **extra)
    return e


def pump(db_url: str, mailbox_url: str, home, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([MSGX_BIN, "pump", "--drain"], env=env(db_url, mailbox_url, home, **extra),
                          capture_output=True, text=True, timeout=300)


def outcome(db_url: str, mailbox_url: str) -> dict:
    """Everything a crash could corrupt, in a comparable form."""
    engine = make_engine(db_url)
    gate = detail_tables["flight_gate"]
    with engine.connect() as conn:
        flights = conn.execute(select(flight_schd.c.flid, flight_schd.c.state_version, flight_schd.c.last_message_id,
                                      flight_schd.c.deleted).order_by(flight_schd.c.flid)).fetchall()
        gates = conn.execute(select(gate.c.flid, gate.c.ordinal, gate.c.source_seq, gate.c.gate, gate.c.gtyp)
                             .order_by(gate.c.flid, gate.c.ordinal)).fetchall()
        statuses = conn.execute(select(proc_state.c.msg_id, proc_state.c.status, proc_state.c.reason,
                                       proc_state.c.dup_of).order_by(proc_state.c.msg_id)).fetchall()
        evs = conn.execute(select(msg_event.c.msg_id, msg_event.c.topic, msg_event.c.kind, msg_event.c.state_version,
                                  msg_event.c.payload, msg_event.c.released_at.is_not(None))
                           .order_by(msg_event.c.msg_id, msg_event.c.event_id)).fetchall()
        terminal_writes = Counter(r[0] for r in conn.execute(
            select(proc_state_hst.c.msg_id).where(proc_state_hst.c.status.in_(("SUCCEEDED", "SKIPPED", "DEAD")))))
        todo_open = conn.execute(text("SELECT count(*) FROM backfill_todo WHERE status = 'PENDING'")).scalar_one()
    engine.dispose()
    mb = Mailbox(mailbox_url)
    with mb.engine.connect() as conn:
        unmarked = conn.execute(text("SELECT count(*) FROM cminmsgs "
                                     "WHERE CMINMSGS_DATE_PROCESSED IS NULL")).scalar_one()
    mb.dispose()
    return {"flights": [tuple(r) for r in flights], "gates": [tuple(r) for r in gates],
            "statuses": [tuple(r) for r in statuses], "events": [tuple(r) for r in evs],
            "terminal_writes": terminal_writes, "todo_open": todo_open, "unmarked": unmarked}


@pytest.fixture(scope="module")
def bodies() -> list[str]:
    return workload()


@pytest.fixture(scope="module")
def reference(pg_dbs, mysql_dbs, bodies, tmp_path_factory) -> dict:
    db, mb = pg_dbs.fresh(), mysql_dbs.fresh()
    fill(mb, bodies)
    done = pump(db, mb, tmp_path_factory.mktemp("ref"))
    assert done.returncode == 0, done.stderr[-2000:]
    ref = outcome(db, mb)
    assert len(ref["statuses"]) == N and ref["unmarked"] == 0
    assert {s for _, s, _, _ in ref["statuses"]} == {"SUCCEEDED", "SKIPPED", "DEAD"}
    return ref


@pytest.mark.parametrize("fault", ["before_tx1_commit:400", "between_tx1_tx2:350", "after_tx2:500",
                                   "inside_backfill:1"])
def test_sigkill_at_each_step_then_restart(fault, reference, pg_dbs, mysql_dbs, bodies, tmp_path):
    """The crash matrix row for one protocol step (see module docstring)."""
    db, mb = pg_dbs.fresh(), mysql_dbs.fresh()
    fill(mb, bodies)
    # Without a post-commit step the two transactions are folded into one commit; force them apart
    # for the row that crashes between them (the path a configured Redis projection takes).
    split = {"MSGX_SPLIT_TRANSACTIONS": "1"} if fault.startswith("between_tx1_tx2") else {}
    killed = pump(db, mb, tmp_path, MSGX_FAULT_STEP=fault, **split)
    assert killed.returncode == -9, f"the fault {fault} did not fire: rc={killed.returncode} {killed.stderr[-1000:]}"
    mid = outcome(db, mb)
    assert 0 < sum(1 for _, s, _, _ in mid["statuses"] if s in ("SUCCEEDED", "SKIPPED", "DEAD")) < N
    restarted = time.monotonic()
    done = pump(db, mb, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    recovery(f"pump killed at {fault.split(':')[0]} (1,000 rows)", restarted,
             "pump started again -> last row processed")
    got = outcome(db, mb)
    assert got["statuses"] == reference["statuses"]                      # every row terminal, same verdict
    assert set(got["terminal_writes"].values()) == {1} and len(got["terminal_writes"]) == N   # exactly once
    assert got["flights"] == reference["flights"] and got["gates"] == reference["gates"]
    assert got["events"] == reference["events"]                          # no duplicated events, all released
    assert got["todo_open"] == 0 and got["unmarked"] == 0                # every mark written
