"""The failure the demo rehearses: its state database refuses one flight's cancellation.

On a live system a message dies of something outside it: a database that refuses a write (a
revoked privilege, a full disk, a constraint someone added), retried until the retries run out.
The demo stages one such refusal with a PostgreSQL trigger on ``flight_schd`` that refuses to
cancel the one flight ``DemoFault`` names, so the day's ``FLOP/CNCL`` for it is retried (about
15 s at the queue head) and ends DEAD(exhausted), a dead letter an operator can replay.

The fix step is ``msgx demo --fix-fault``: it drops the trigger. Then ``msgx replay --ids N``
shows the message as replayable and ``--apply --operator NAME --reason TEXT`` re-queues it; the
pump (the inbox sensor under Dagster, or ``msgx pump --drain``) then cancels the flight.

Only the demo's own embedded database ever gets the trigger (``Demo.load_day``), right after its
fresh schema is created; dropping it is harmless where it does not exist.
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from msgx_engine.demo.day import DemoFault

TRIGGER = "msgx_demo_fault"

_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  RAISE EXCEPTION 'demo fault: the state database refuses to cancel flight % (%); the fix: msgx demo --fix-fault',
    NEW.flid, NEW.flno USING ERRCODE = 'insufficient_privilege';
END
$fn$
"""


def install(engine: Engine, fault: DemoFault) -> None:
    """Refuse the cancellation of ``fault.flid``; every other write passes."""
    flid = fault.flid.replace("'", "''")          # a generated FLID: digits only, quoted all the same
    with engine.begin() as conn:
        conn.execute(text(_FUNCTION))
        conn.execute(text(f"DROP TRIGGER IF EXISTS {TRIGGER} ON flight_schd"))
        conn.execute(text(f"CREATE TRIGGER {TRIGGER} BEFORE UPDATE ON flight_schd FOR EACH ROW "
                          f"WHEN (NEW.flid = '{flid}' AND NEW.cncl IS DISTINCT FROM OLD.cncl) "
                          f"EXECUTE FUNCTION {TRIGGER}()"))


def remove(engine: Engine) -> bool:
    """The fix step: drop the refusal. Returns whether there was one to drop."""
    with engine.begin() as conn:
        present = conn.execute(text("SELECT 1 FROM pg_trigger WHERE tgname = :name"), {"name": TRIGGER}).first()
        conn.execute(text(f"DROP TRIGGER IF EXISTS {TRIGGER} ON flight_schd"))
        conn.execute(text(f"DROP FUNCTION IF EXISTS {TRIGGER}()"))
    return present is not None
