"""A real infrastructure fault for tests: a trigger on ``flight_schd`` that raises while a row sits in
``fault_switch`` (a full disk, say), so transaction 1 fails inside PostgreSQL and the message goes
FAILED(INFRA), then DEAD(exhausted). Removing the row is "the fault is fixed"."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.pipeline_support import drain_now, proc

FAULT = """
CREATE TABLE fault_switch (flid text);
CREATE FUNCTION injected_fault() RETURNS trigger AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM fault_switch WHERE flid = NEW.flid OR flid = '*') THEN
    RAISE EXCEPTION 'could not extend file: No space left on device (injected)';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER injected_fault BEFORE INSERT OR UPDATE ON flight_schd
  FOR EACH ROW EXECUTE FUNCTION injected_fault();
"""


def sql(app, statement: str, **params):
    with app.engine.begin() as conn:
        result = conn.execute(text(statement), params)
        return result.fetchall() if result.returns_rows else None


@pytest.fixture(name="fault")
def fault_fixture(app):
    """``fault(flid)`` breaks writes of that flight ('*': all); ``fault.fix()`` repairs them."""
    with app.engine.begin() as conn:
        conn.exec_driver_sql(FAULT)

    class Fault:
        def __call__(self, flid: str = "*") -> None:
            sql(app, "INSERT INTO fault_switch VALUES (:f)", f=flid)

        def fix(self) -> None:
            sql(app, "DELETE FROM fault_switch")

    return Fault()


def until_dead(app, clock, msg_id: int) -> None:
    """Drain and move the clock past each backoff until the message is dead-lettered."""
    for _ in range(10):
        drain_now(app)
        if proc(app, msg_id).status == "DEAD":
            return
        clock.advance(60)
    raise AssertionError(f"{msg_id} never went DEAD: {proc(app, msg_id)}")
