"""The pace of the pump's inline backfill (latency): while messages keep coming, the
marks are written in batches at most every ``PumpOptions.backfill_every_s``, and a quiet pass
always writes what is owed, so no mark is left behind (DESIGN §2 step 9: the mark is written once,
after the commit, onto a NULL value)."""

from __future__ import annotations

from builders import gtdt

from msgx_engine.pipeline.pump import PumpOptions


def test_a_busy_pass_writes_marks_at_most_every_backfill_every_s_and_a_quiet_one_always(app):
    pump = app.pump(PumpOptions(backfill_every_s=0.1))
    assert pump._backfill_due(True, 1000.0)            # the first batch of the run
    assert not pump._backfill_due(True, 1000.05)       # messages keep coming: not yet
    assert pump._backfill_due(False, 1000.06)          # a quiet pass writes what is owed
    assert not pump._backfill_due(True, 1000.10)
    assert pump._backfill_due(True, 1000.17)           # 0.1 s after the last batch


def test_marks_owed_while_messages_keep_coming_are_all_written_when_the_pump_drains(app):
    """With the pace at an hour, only the first busy pass and the quiet passes write marks; every
    processed message is marked, once, when the drain ends."""
    ids = [app.mailbox.put(gtdt(f"BP{n}", (1, f"G{n}"))) for n in range(6)]
    summary = app.pump(PumpOptions(backfill_every_s=3600.0)).run()
    assert summary.processed["SUCCEEDED"] == 6 and summary.marked == 6
    marks = app.mailbox.processed_at(ids)
    assert sorted(marks) == ids and all(mark is not None for mark in marks.values())
