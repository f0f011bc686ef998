"""The cut-over record as the Dagster ticks read it (OPS-4). An installation whose writes are stopped
(``msgx cutover stop-writes``) starts no pump, dispatch, mark or request run. Every one of them
would only refuse (the pump and the dispatcher read the record themselves, the request tracker
refuses to register or send): a tick that skips saying "writes stopped for cut-over at mailbox id
W (by NAME, at TIME)" tells the operator in the UI what a failed run every few seconds would hide.
An installation that took the right over is watched for 48 hours (``compare.observation``): the
hourly compare schedule runs then even without a reference, to report that window on the
``parallel_run`` asset.

One short connection per tick (no pool: a tick holds nothing between ticks). A record that cannot
be read (the database down, or no database configured) does not skip: the run starts and reports
the outage or the configuration itself, as it would without a cut-over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import dagster as dg
from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from msgx_dagster.resources import MsgxResource
from msgx_engine.compare import observation
from msgx_engine.config import ConfigError
from msgx_engine.db import make_engine
from msgx_engine.store import cutover_state, monitoring
from msgx_engine.store.cutover_state import Stop

log = logging.getLogger(__name__)
T = TypeVar("T")


def _read(what: Callable[[Connection], T], msgx: MsgxResource | None) -> T | None:
    """``what`` of the state database over one short connection, or None (see the module doc)."""
    try:
        engine = make_engine((msgx or MsgxResource()).settings().resolved().db_url or "", single=True)
    except ConfigError as exc:
        log.warning("the cut-over record was not read (%s): the tick goes on as usual", exc)
        return None
    try:
        with engine.connect() as conn:
            return what(conn)
    except SQLAlchemyError as exc:
        log.warning("the cut-over record could not be read (%s): the tick goes on as usual", exc.__class__.__name__)
        return None
    finally:
        engine.dispose()


def writes_stopped(msgx: MsgxResource | None = None) -> Stop | None:
    """This installation's stop, or None (writes open, no cut-over, or the record unreadable)."""
    return _read(cutover_state.stop, msgx)


def observing(msgx: MsgxResource | None = None) -> bool:
    """The 48 hours after this installation took the right over are not over yet."""
    def read(conn: Connection) -> bool:
        now = monitoring.database_now(conn)
        return observation.open_at(observation.read(conn, now), now)

    return bool(_read(read, msgx))


def stopped_skip(found: Stop, starts: str) -> dg.SkipReason:
    """The skip of a tick that would start ``starts`` (e.g. "no pump run")."""
    return dg.SkipReason(f"{found.describe()}: {starts} here until `msgx cutover resume` or `msgx cutover "
                         "rollback` gives the writes back; the installation that took over does this work")


def skip_if_stopped(starts: str, msgx: MsgxResource | None = None) -> dg.SkipReason | None:
    found = writes_stopped(msgx)
    return stopped_skip(found, starts) if found is not None else None
