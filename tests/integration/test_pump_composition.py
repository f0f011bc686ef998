"""The composition root picks the unit of work: ``App.processor()`` alone commits one message at
a time, ``App.pump()`` runs the processor under the group commit unless ``group_messages=1``."""

from __future__ import annotations

from msgx_engine.pipeline.grouping.grouped import Grouped
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.pipeline.unit_of_work import OneMessage


def test_the_processor_alone_commits_one_message_at_a_time(app):
    assert type(app.processor().uow) is OneMessage


def test_the_pump_groups_unless_asked_for_one_message(app):
    def released() -> None:
        return None

    grouped = app.pump(on_release=released)
    assert type(grouped.uow) is Grouped and grouped.processor.uow is grouped.uow
    assert grouped.uow.on_release is released and grouped.uow.behind is not None
    assert app.pump(PumpOptions(write_behind=False)).uow.behind is None
    alone = app.pump(PumpOptions(group_messages=1), on_release=released)
    assert type(alone.uow) is OneMessage and alone.processor.uow is alone.uow
    assert alone.uow.on_release is released

