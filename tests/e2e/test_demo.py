"""`msgx demo --headless` end to end (README command 1): the embedded PostgreSQL, the demo day,
pump_job executed THROUGH Dagster against the demo's instance (PostgreSQL run storage), the
summary, `dagster run list`, `msgx flights`, and the rehearsed failure's fix and replay. One demo
run per module; each test reads what it left (the replay, which changes it, runs last).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from msgx_engine import embedded
from msgx_engine.demo.day import DemoDay, demo_day
from msgx_engine.store.tables import flight_schd, operator_audit, proc_state

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


@dataclass
class HeadlessRun:
    home: Path
    env: dict[str, str]
    proc: subprocess.CompletedProcess
    day: DemoDay


def demo_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MSGX_", "DAGSTER_"))}
    env["MSGX_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def headless() -> Iterator[HeadlessRun]:
    home = Path(tempfile.mkdtemp(prefix="msgx-demo-"))   # short: the server's unix socket lives here
    env = demo_env(home)
    try:
        proc = subprocess.run([str(BIN / "msgx"), "demo", "--headless"], env=env, capture_output=True, text=True,
                              timeout=600, cwd=home)
        found = re.search(r"demo day (\d{4}-\d\d-\d\d) \(seed (\d+), as of (\d\d:\d\d)\)", proc.stdout)
        assert proc.returncode == 0 and found, proc.stdout[-4000:] + proc.stderr[-4000:]
        day = date.fromisoformat(found[1])
        now = datetime.combine(day, datetime.strptime(found[3], "%H:%M").time())
        yield HeadlessRun(home, env, proc, demo_day(day, int(found[2]), now=now))
    finally:
        embedded.stop(home)
        subprocess.run(["rm", "-rf", str(home)], check=False)


def test_every_message_ends_with_the_verdict_the_day_promises(headless):
    """US-03 AC1/AC2, INV-30, US-04, INV-9: every demo message is terminal, each with exactly the
    (status, reason) the generator promised for it, in mailbox order (the good ones SUCCEEDED, the
    deliberate ones DEAD(malformed) / SKIPPED(duplicate, identity_conflict, ignored, unsupported))."""
    server = embedded.start(headless.home)
    engine = create_engine(server.url(embedded.STATE_DB))
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(proc_state.c.msg_id, proc_state.c.status, proc_state.c.reason)
                                .order_by(proc_state.c.msg_id)).fetchall()
    finally:
        engine.dispose()
    assert [r.msg_id for r in rows] == list(range(1, len(headless.day.messages) + 1))
    got = [(r.status, r.reason) for r in rows]
    wrong = [(i + 1, m.kind, m.expect, g) for i, (m, g) in enumerate(zip(headless.day.messages, got, strict=True))
             if m.expect != g]
    assert wrong == []


def test_the_summary_prints_counts_time_and_three_flights(headless):
    """The headless summary: a TYPE/STYP x status table whose totals are the promised counts, the
    reasons, the time taken, three example flights, and the promise kept."""
    out = headless.proc.stdout
    promised = headless.day.expected_statuses()
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert total.split()[1:4] == [str(promised["SUCCEEDED"]), str(promised["SKIPPED"]), str(promised["DEAD"])]
    assert re.search(r"pump_job through Dagster: \d+\.\d s wall clock", out)
    assert "FLOP/GTDT" in out and "SCHD/DNLD" in out and "ABDG/DNLD" in out
    assert "SKIPPED   duplicate" in out and "DEAD      malformed" in out and "DEAD      exhausted" in out
    for flid in headless.day.examples:
        assert f"FLID {flid}" in out
    assert "DIVERTED to" in out and "code-share" in out
    assert "every message reached the verdict the demo day promises" in out


def test_the_run_is_in_the_postgres_run_storage(headless):
    """DESIGN §4/§5: the demo's instance keeps runs in PostgreSQL (dagster-postgres) with the
    singleton limit; `dagster run list` on that DAGSTER_HOME shows the headless pump_job run."""
    import dagster as dg
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    from msgx_dagster.run_limits import limits_singleton

    home = headless.home / "dagster"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        assert limits_singleton(instance, {"singleton": "pump"})
        runs = instance.get_runs(dg.RunsFilter(job_name="pump_job", tags={"msgx/demo": "headless"}))
        assert len(runs) == 1 and runs[0].status == dg.DagsterRunStatus.SUCCESS
        run_id = runs[0].run_id
    listed = subprocess.run([str(BIN / "dagster"), "run", "list"], env={**headless.env, "DAGSTER_HOME": str(home)},
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert run_id in listed.stdout


def test_msgx_flights_lists_the_day(headless):
    """US-12: `msgx flights` lists the demo day: the snapshot's flights minus the FDEL'd one and the
    code-share child (D11), each owned by the day (FDAY, D3/D4). The demo itself
    needs no MSGX_EMBEDDED (its Dagster processes are started with it), a later command on the
    embedded server must ask for it as the demo's summary says, and is refused (exit 2) without."""
    import json

    assert f"MSGX_HOME={headless.home} MSGX_EMBEDDED=1 " in headless.proc.stdout
    refused = subprocess.run([str(BIN / "msgx"), "flights"], env=headless.env, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2 and "MSGX_EMBEDDED=1" in refused.stderr
    proc = subprocess.run([str(BIN / "msgx"), "flights"], env={**headless.env, "MSGX_EMBEDDED": "1"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    flights = json.loads(proc.stdout)
    assert sorted(f["FLID"] for f in flights) == list(headless.day.flights)
    assert {f["FDAY"] for f in flights} == {headless.day.day.isoformat()}
    assert sum(1 for f in flights if f.get("CNCL")) >= 3
    assert sum(1 for f in flights if f.get("FDIV")) == 1


def msgx(run: HeadlessRun, *args: str, embedded_flag: bool = True) -> subprocess.CompletedProcess:
    env = {**run.env, "MSGX_EMBEDDED": "1"} if embedded_flag else run.env
    return subprocess.run([str(BIN / "msgx"), *args], env=env, capture_output=True, text=True, timeout=300)


def test_the_rehearsed_failure_replays_after_the_fix_step(headless):
    """US-10 on the demo: the day's one refused cancellation is a dead letter,
    DEAD(exhausted), whose preview names the cause and the fix; the printed hints give the three
    steps; after `msgx demo --fix-fault` the audited `msgx replay --apply` re-queues it and the
    pump cancels the flight (SUCCEEDED). Runs last: it changes the day the other tests read."""
    fault = headless.day.fault
    assert fault is not None
    msg_id = fault.index + 1                                  # a fresh mailbox: ids 1..n in day order
    out = headless.proc.stdout
    assert f"mailbox id {msg_id}" in out and f"FLID {fault.flid}" in out
    assert f"replay --ids {msg_id} --apply --operator" in out and "demo --fix-fault" in out
    assert "pump --drain" in out

    preview = msgx(headless, "replay", "--ids", str(msg_id))
    assert preview.returncode == 0, preview.stderr[-2000:]
    assert "DEAD(exhausted)" in preview.stdout and "msgx demo --fix-fault" in preview.stdout
    assert "verdict: replayable" in preview.stdout

    fixed = msgx(headless, "demo", "--fix-fault", embedded_flag=False)
    assert fixed.returncode == 0 and "fixed:" in fixed.stdout, fixed.stdout + fixed.stderr[-2000:]
    applied = msgx(headless, "replay", "--ids", str(msg_id), "--apply", "--operator", "rehearsal",
                   "--reason", "database refusal fixed")
    assert applied.returncode == 0 and "re-queued 1 message(s)" in applied.stdout, applied.stdout + applied.stderr
    drained = msgx(headless, "pump", "--drain")
    assert drained.returncode == 0, drained.stderr[-3000:]

    server = embedded.start(headless.home)
    engine = create_engine(server.url(embedded.STATE_DB))
    try:
        with engine.connect() as conn:
            row = conn.execute(select(proc_state.c.status, proc_state.c.reason)
                               .where(proc_state.c.msg_id == msg_id)).one()
            cncl = conn.execute(select(flight_schd.c.cncl).where(flight_schd.c.flid == fault.flid)).scalar_one()
            audited = conn.execute(select(operator_audit.c.operator, operator_audit.c.action)).fetchall()
    finally:
        engine.dispose()
    assert (row.status, row.reason) == ("SUCCEEDED", None)
    assert cncl
    assert ("rehearsal", "replay") in [(a.operator, a.action) for a in audited]
    again = msgx(headless, "demo", "--fix-fault", embedded_flag=False)
    assert again.returncode == 0 and "nothing to fix" in again.stdout
