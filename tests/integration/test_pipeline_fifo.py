"""FIFO property (INV-3, US-03 AC1, US-01 AC5): random interleavings of inserts (with holes and
late commits), failures, retries and clock moves never let a larger id reach a state change while a
smaller registered id is still open. Drives Intake.scan + Processor.step with a ManualClock."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, text

from msgx_engine.mailbox.tables import cminmsgs
from msgx_engine.pipeline.intake import Intake
from msgx_engine.pipeline.writer import try_lock
from msgx_engine.store.status import OPEN, TERMINAL
from msgx_engine.store.tables import detail_tables, proc_state
from tests.builders import gtdt

OWN_TABLES = ["proc_state", "proc_state_hst", "backfill_todo", "intake_gap", "msg_event", "flight_schd",
              *detail_tables]

ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 3), st.booleans()),   # failures for it, leave a hole first
    st.tuples(st.just("fill"), st.just(0), st.just(False)),        # a held-back smaller id commits now
    st.tuples(st.just("step"), st.integers(1, 4), st.just(False)),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 1, 3, 6, 20]), st.just(False)),
), min_size=5, max_size=30)


def _reset(app) -> None:
    with app.engine.begin() as conn:
        conn.execute(text("TRUNCATE " + ", ".join(OWN_TABLES)))
    with app.mailbox.engine.connect() as conn:
        conn.execute(text("TRUNCATE TABLE cminmsgs"))


def _open_ids(conn) -> list[int]:
    ids = [r[0] for r in conn.execute(select(proc_state.c.msg_id).where(proc_state.c.status.in_(OPEN))
                                      .order_by(proc_state.c.msg_id))]
    conn.commit()
    return ids


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=ops)
def test_no_larger_id_overtakes_an_open_smaller_one(app, clock, script):
    """INV-3: every processed step acts on the smallest open registered id (holes excepted until
    their grace passes; a late row becomes the head once registered)."""
    _reset(app)
    budget: dict[int, int] = {}

    def flaky(conn, msg_id, states):
        if budget.get(msg_id, 0) > 0:
            budget[msg_id] -= 1
            raise ConnectionError("injected")

    app.post_commit[:] = [flaky]
    processor, intake = app.processor(), Intake(app.mailbox, clock)
    next_id, held_back = 1, []
    with app.engine.connect() as conn:
        assert try_lock(conn)
        # The tail gives liveness enough room: every message fails at most 5 times (then DEAD), one
        # attempt per advance of the clock, so 5 x 30 rounds always suffice.
        tail = [("step", 1, False)] + [("advance", 61, False), ("step", 40, False)] * 150
        for op, arg, hole in script + tail:
            if op == "put":
                if hole:
                    held_back.append(next_id)
                    next_id += 1
                budget[next_id] = arg
                with app.mailbox.engine.connect() as m:
                    m.execute(cminmsgs.insert().values(CMINMSGS_ID=next_id, CMINMSGS_STATUS="VALID",
                                                       CMINMSGS_CLOB_MSG=gtdt(f"P{next_id}", (1, "A1"))))
                next_id += 1
            elif op == "fill" and held_back:
                late = held_back.pop(0)
                with app.mailbox.engine.connect() as m:
                    m.execute(cminmsgs.insert().values(CMINMSGS_ID=late, CMINMSGS_STATUS="VALID",
                                                       CMINMSGS_CLOB_MSG=gtdt(f"P{late}", (1, "B1"))))
            elif op == "advance":
                clock.advance(arg)
            elif op == "step":
                for _ in range(arg):
                    intake.scan(conn)
                    before = _open_ids(conn)
                    result = processor.step(conn)
                    if result.kind == "processed":
                        assert before and result.msg_id == before[0], (result, before)
                    else:
                        break
        final = {r[0]: r[1] for r in conn.execute(select(proc_state.c.msg_id, proc_state.c.status))}
        conn.commit()
    # Liveness: after the grace and the backoffs have passed, every registered row is terminal.
    assert all(s in TERMINAL for s in final.values()), sorted(final.items())
