"""Code-share cascade in one transaction (INV-21/22, D30), against PostgreSQL and MariaDB."""

from __future__ import annotations

from builders import flop, state
from sqlalchemy import select, text

from msgx_engine.pipeline.intake import Intake
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.pipeline.writer import try_lock
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.tables import proc_state


def test_master_delete_is_atomic_with_its_children(app, clock):
    """INV-22, US-05 AC5: a failure while deleting one child rolls back the whole cascade (no
    half-deleted pair); the retry then deletes master and children together."""
    family = [state("M", MAFL=[{"FLID": "C1"}, {"FLID": "C2"}]), state("C1", MAID="M"), state("C2", MAID="M")]
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states(family)
        conn.execute(text(
            "CREATE FUNCTION refuse_c2() RETURNS trigger AS $$ BEGIN "
            "IF NEW.flid = 'C2' AND NEW.deleted THEN RAISE EXCEPTION 'injected'; END IF; RETURN NEW; END $$ "
            "LANGUAGE plpgsql"))
        conn.execute(text("CREATE TRIGGER refuse_c2 BEFORE UPDATE ON flight_schd FOR EACH ROW "
                          "EXECUTE FUNCTION refuse_c2()"))
    app.mailbox.put(flop("FDEL", "M", "<FDEL/>"))
    with app.engine.connect() as conn:
        assert try_lock(conn)            # the writer lock a pump would hold (OPS-1)
        Intake(app.mailbox, clock).scan(conn)
        result = app.processor().step(conn)
        assert result.status == "FAILED"
        states = FlightRepository(conn).load(["M", "C1", "C2"])
        assert [states[f].deleted for f in ("M", "C1", "C2")] == [False, False, False]
        assert {s.state_version for s in states.values()} == {2}
        conn.execute(text("DROP TRIGGER refuse_c2 ON flight_schd"))
        conn.commit()
    clock.advance(60)
    app.pump(PumpOptions()).run()
    with app.engine.connect() as conn:
        states = FlightRepository(conn).load(["M", "C1", "C2"])
        assert conn.execute(select(proc_state.c.status)).scalar_one() == "SUCCEEDED"
    assert [states[f].deleted for f in ("M", "C1", "C2")] == [True, True, True]
