"""INV-31 / US-06 AC5: a crash anywhere in a snapshot's processing leaves either the old generation
whole or the new one whole, and the restarted pump converges to the crash-free result.

``msgx pump --drain`` runs in a subprocess and is SIGKILLed by MSGX_FAULT_STEP at each protocol
step; a failure raised late inside the snapshot write (after the flights, deletes and member list
are written) shows the in-transaction rollback in-process.
"""

from __future__ import annotations

import subprocess
from datetime import date

import pytest
from conftest import MSGX_BIN
from snapshot_builders import dnld, fltr, pump, query, sodt, status, whole_state
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from msgx_engine.pipeline import routing
from msgx_engine.pipeline.routing import Route

D9 = date(2026, 9, 9)


def _first():
    return dnld(*(fltr(f, sodt(9), gates=2, desks=2, routes=1, stands=1) for f in ("A", "B", "C")))


def _second():
    return dnld(*(fltr(f, sodt(9), stnd="777", gates=1) for f in ("A", "C", "D")))


def _expected_after_second(m1: int, m2: int) -> dict:
    return {
        "ledger": [(D9, 2, m2)],
        "members": [("A",), ("C",), ("D",)],
        "flights": [("A", D9, False, 2, m2), ("B", D9, True, 2, m2), ("C", D9, False, 2, m2), ("D", D9, False, 1, m2)],
        "events": [(m2, "A", "state", 2), (m2, "C", "state", 2), (m2, "D", "state", 1), (m2, "B", "tombstone", 2)],
        "gates": [("A", 1, "G1A"), ("B", 1, "G1B"), ("B", 2, "G2B"), ("C", 1, "G1C"), ("D", 1, "G1D")],
        "status": [(m1, "SUCCEEDED"), (m2, "SUCCEEDED")],
        "runs": [(m1, 1), (m2, 2)],
    }


def _outcome(app) -> dict:
    return {
        "ledger": query(app, "SELECT fday, version, last_message_id FROM schd_gen"),
        "members": query(app, "SELECT flid FROM schd_gen_flid ORDER BY flid"),
        "flights": query(app, "SELECT flid, fday, deleted, state_version, last_message_id "
                              "FROM flight_schd ORDER BY flid"),
        "events": query(app, "SELECT msg_id, flid, kind, state_version FROM msg_event "
                             "WHERE msg_id > 1 ORDER BY event_id"),
        "gates": query(app, "SELECT flid, ordinal, gate FROM flight_gate ORDER BY flid, ordinal"),
        "status": query(app, "SELECT msg_id, status FROM proc_state ORDER BY msg_id"),
        "runs": query(app, "SELECT msg_id, version FROM schd_gen_run ORDER BY msg_id"),
    }


def _pump_subprocess(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([MSGX_BIN, "pump", "--drain"], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("step", [None, "before_tx1_commit", "between_tx1_tx2", "after_tx2"])
def test_crash_at_each_step_keeps_a_whole_generation_and_converges(app, env_for, step):
    """INV-31, US-06 AC5, FS §3.3 step 6: killed before commit -> the old generation (ledger,
    member list, flights, details, no events) is untouched; killed after commit -> the new one is
    complete and is not applied twice; either way the restart ends exactly like a crash-free run."""
    (m1,) = pump(app, _first())
    old = whole_state(app)
    m2 = app.mailbox.put(_second())

    if step is not None:
        # without a post-commit step both transactions commit together unless split (DESIGN P8)
        split = {"MSGX_SPLIT_TRANSACTIONS": "1"} if step == "between_tx1_tx2" else {}
        killed = _pump_subprocess(env_for(MSGX_FAULT_STEP=step, **split))
        assert killed.returncode == -9, killed.stderr[-2000:]
        if step == "before_tx1_commit":
            assert whole_state(app) == old
            assert query(app, "SELECT status, applied_at IS NULL FROM proc_state WHERE msg_id = :m", m=m2) == [
                ("PENDING", True)]
        else:
            assert _outcome(app)["ledger"] == [(D9, 2, m2)]

    done = _pump_subprocess(env_for())
    assert done.returncode == 0, done.stderr[-2000:]
    assert _outcome(app) == _expected_after_second(m1, m2)
    assert app.mailbox.processed_at([m2])[m2] is not None


def test_failure_late_in_the_write_rolls_back_every_part(app, monkeypatch):
    """INV-31: the request is taken away after the locked read, so completing it fails after the
    flights, soft deletes and member list were already written in the transaction: all of it rolls
    back (FAILED(INFRA)), and the retry, whose request is closed by then, is SKIPPED(late_answer)
    (C-24: an answer to a closed request is never applied)."""
    pump(app, dnld(*(fltr(f, sodt(9), gates=1) for f in ("A", "B"))))
    with app.engine.begin() as conn:
        req = conn.execute(text("INSERT INTO req_track (rtype, styp, fday, status, sent_at) "
                                "VALUES ('RQFD', 'NONE', :d, 'SENT', :t) RETURNING req_id"),
                           {"d": D9, "t": app.clock.now()}).scalar_one()
    original = routing.ROUTES[("SCHD", "RESP")]
    foreign = create_engine(app.settings.db_url, poolclass=NullPool)

    def load_then_expire(conn, msg, msg_id):
        ctx = original.load(conn, msg, msg_id)
        with foreign.begin() as other:
            other.execute(text("UPDATE req_track SET status = 'EXPIRED' WHERE req_id = :r"), {"r": req})
        return ctx

    monkeypatch.setitem(routing.ROUTES, ("SCHD", "RESP"), Route(load_then_expire, original.decide))
    before = whole_state(app)
    resp = dnld(fltr("A", sodt(9), gates=2), fltr("C", sodt(9))).replace("<STYP>DNLD</STYP>", "<STYP>RESP</STYP>")
    (m,) = pump(app, resp.replace("20260908220000", "20260101090000"))
    assert query(app, "SELECT status, error_class FROM proc_state WHERE msg_id = :m", m=m) == [("FAILED", "INFRA")]
    assert whole_state(app) == before

    app.clock.advance(2)
    pump(app)
    assert status(app, m) == ("SKIPPED", "late_answer")
    assert whole_state(app) == before
    foreign.dispose()
