"""Shadow intake (OPS-3 "input by watermark", D29): a shadow reads the mailbox by id, never by the
processed mark production writes beside it, and writes nothing to it.

Rows with explicit ids model inserts that commit out of order; the ManualClock runs the gap grace.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from builders import gtdt
from sqlalchemy import text

from msgx_engine.app import App
from msgx_engine.mailbox.adapter import MailboxReadOnly
from msgx_engine.mailbox.tables import cminmsgs
from tests.pipeline_support import drain_now, gates, proc

MARKED = datetime(2026, 1, 1, 8, 0, 0)


def _put_at(app, msg_id: int, body: str, processed: datetime | None = None) -> None:
    with app.mailbox.engine.connect() as conn:
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=msg_id, CMINMSGS_CLOB_MSG=body, CMINMSGS_STATUS="VALID",
                                              CMINMSGS_DATE_PROCESSED=processed))


@pytest.fixture
def shadow(settings, pg_dbs, clock):
    application = App.from_settings(replace(settings, db_url=pg_dbs.fresh(), mode="shadow"), clock=clock)
    yield application
    application.dispose()


def test_ops3_shadow_processes_rows_production_already_marked_and_late_ones_through_their_gap(app, shadow, clock):
    """OPS-3, D29: rows production has processed and marked are still new to the shadow (no
    "state behind mailbox" refusal); a row that commits late below them, already marked, is found
    through its recorded gap and processed; the marks are never touched and no mark is owed.
    (The shadow starts before these rows: a fresh one adopts what production marked before it.)"""
    drain_now(shadow)
    _put_at(app, 1, gtdt("SI1", (1, "A1")), MARKED)
    _put_at(app, 3, gtdt("SI3", (1, "C1")), MARKED)
    drain_now(shadow)
    assert proc(shadow, 1).status == "SUCCEEDED" and proc(shadow, 3).status == "PENDING"   # waits for id 2
    _put_at(app, 2, gtdt("SI2", (1, "B1")), MARKED)
    clock.advance(1)
    drain_now(shadow)
    assert [proc(shadow, i).status for i in (1, 2, 3)] == ["SUCCEEDED"] * 3
    assert gates(shadow, "SI2") == [(1, "B1")]
    assert set(app.mailbox.processed_at([1, 2, 3]).values()) == {MARKED}
    with shadow.engine.connect() as conn:
        todos = conn.execute(text("SELECT status, count(*) FROM backfill_todo GROUP BY status")).fetchall()
    assert [tuple(t) for t in todos] == [("SHADOW", 3)]


def test_ops3_a_fresh_shadow_starts_where_production_stands(app, shadow):
    """OPS-3: a shadow started beside a running production adopts the rows production already
    marked (it follows from there, it does not reprocess history) and processes the unmarked rest."""
    _put_at(app, 1, gtdt("SA1", (1, "A1")), MARKED)
    _put_at(app, 2, gtdt("SA2", (1, "B1")))
    drain_now(shadow)
    with shadow.engine.connect() as conn:
        assert [r[0] for r in conn.execute(text("SELECT msg_id FROM proc_state"))] == [2]
    assert proc(shadow, 2).status == "SUCCEEDED" and app.mailbox.processed_at([2])[2] is None


def test_ops3_read_only_mailbox_refuses_every_write(shadow):
    """D29: the shadow's mailbox adapter refuses marks, COUTMSGS inserts and CMINMSGS inserts before a
    statement reaches the server."""
    with pytest.raises(MailboxReadOnly, match="CMINMSGS_DATE_PROCESSED"):
        shadow.mailbox.mark_where_null([1], MARKED)
    with pytest.raises(MailboxReadOnly, match="COUTMSGS"):
        shadow.mailbox.send_request("<MSG/>", "RQFD")
    with pytest.raises(MailboxReadOnly, match="CMINMSGS row"):
        shadow.mailbox.put("<MSG/>")
    assert shadow.mailbox_lock() is None
