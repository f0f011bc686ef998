"""Group commit (docs/decisions.md P10): the pump commits consecutive folded messages
together; a message that would roll back abandons the open group, which is redone one commit per
message; strict mailbox-id order (INV-3), terminal exactly once (INV-8) and marks written once hold."""

from __future__ import annotations

import logging

from sqlalchemy import event, select
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.handlers.decision import Decision, FlightChange, Plan
from msgx_engine.pipeline import plans, routing
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.state.model import Set
from msgx_engine.store.tables import proc_state_hst
from tests.builders import envelope, gtdt
from tests.pipeline_support import events, gates, history, is_marked, proc


def _drain(app, **options):
    return app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01, **options)).run()


def _terminal_order(app) -> list[int]:
    """The mailbox ids in the order their terminal history rows were written."""
    with app.engine.connect() as conn:
        return [r[0] for r in conn.execute(
            select(proc_state_hst.c.msg_id).where(proc_state_hst.c.status.in_(("SUCCEEDED", "SKIPPED", "DEAD")))
            .order_by(proc_state_hst.c.id))]


def _count_commits(app) -> list[int]:
    commits: list[int] = []
    event.listen(app.engine, "commit", lambda conn: commits.append(1))
    return commits


def test_p10_consecutive_messages_share_one_commit(app):
    """20 GTDT messages drained by the pump take far fewer commits than
    messages, and each is SUCCEEDED once, in id order, released and marked."""
    ids = [app.mailbox.put(gtdt(f"G{i % 4}", (1, f"A{i}"))) for i in range(20)]
    commits = _count_commits(app)
    summary = _drain(app)
    assert summary.processed == {"SUCCEEDED": 20} and summary.marked == 20
    assert len(commits) < 20, f"{len(commits)} commits for 20 messages: nothing was grouped"
    assert _terminal_order(app) == ids                                  # once each, in id order
    assert all(e.released_at is not None for i in ids for e in events(app, i))
    assert all(is_marked(app, i) for i in ids)
    assert gates(app, "G3") == [(1, "A19")]


def test_p10_group_of_one_commits_every_message(app):
    """``group_messages=1`` turns grouping off: at least one commit per message (the old path)."""
    ids = [app.mailbox.put(gtdt("G1", (1, f"A{i}"))) for i in range(5)]
    commits = _count_commits(app)
    summary = _drain(app, group_messages=1)
    assert summary.processed == {"SUCCEEDED": 5} and len(commits) >= 5
    assert _terminal_order(app) == ids


def _regrouped(caplog, msg_id: int) -> bool:
    return any(f"rolled back at mailbox id {msg_id}" in r.getMessage() for r in caplog.records)


def test_p10_a_skipped_message_inside_a_group_is_redone_alone_in_order(app, caplog):
    """A handler's SKIPPED decision rolls its transaction back: the open group is abandoned and
    redone one commit per message, so the messages before it are terminal exactly once, the
    skipped one has no effect, and the messages after it follow in id order (INV-3, INV-8)."""
    before = [app.mailbox.put(gtdt("K1", (1, f"B{i}"))) for i in range(3)]
    skipped = app.mailbox.put(envelope("QQQ", "NONE", "<QQQ>1</QQQ>\n"))
    after = [app.mailbox.put(gtdt("K1", (1, f"C{i}"))) for i in range(3)]
    with caplog.at_level(logging.INFO, logger="msgx_engine.pipeline.protocol"):
        summary = _drain(app)
    assert _regrouped(caplog, skipped)                                    # the group was abandoned there
    assert summary.processed == {"SUCCEEDED": 6, "SKIPPED": 1}           # counted once, after the commits
    assert _terminal_order(app) == before + [skipped] + after
    assert (proc(app, skipped).status, proc(app, skipped).reason) == ("SKIPPED", "unsupported")
    assert events(app, skipped) == [] and gates(app, "K1") == [(1, "C2")]
    for i in before + after:
        assert history(app, i) == [("SUCCEEDED", None, None, None)]
        assert len(events(app, i)) == 2 and is_marked(app, i)


class _Boom(Plan):
    """A plan whose writer fails: transaction 1 of its message fails after the flight was written."""


def _write_boom(conn, plan, msg_id, now):
    raise SQLAlchemyError("plan writer failed")


def test_p10_a_failing_message_inside_a_group_keeps_the_messages_before_it(app, monkeypatch, caplog):
    """A failure in the middle of a group: the messages before it are SUCCEEDED once, the failing
    one is FAILED with its first attempt and nothing of it written (its flight absent, no events),
    and no larger id passes it while it waits for its backoff (INV-3)."""
    monkeypatch.setitem(routing.ROUTES, ("BOOM", "*"), routing.Route(
        lambda conn, msg, msg_id: None,
        lambda msg, ctx: Decision.apply(FlightChange("BOOM1", (Set("STND", "101"),)), plans=(_Boom(),))))
    monkeypatch.setitem(plans.WRITERS, _Boom, _write_boom)
    before = [app.mailbox.put(gtdt("K2", (1, f"B{i}"))) for i in range(3)]
    boom = app.mailbox.put(envelope("BOOM", "NONE", "<BOOM/>\n"))
    behind = app.mailbox.put(gtdt("K2", (1, "Z9")))
    with caplog.at_level(logging.INFO, logger="msgx_engine.pipeline.protocol"):
        summary = _drain(app)
    assert _regrouped(caplog, boom)
    assert summary.processed == {"SUCCEEDED": 3, "FAILED": 1}
    assert _terminal_order(app) == before
    row = proc(app, boom)
    assert (row.status, row.attempts, row.error_class, row.applied_at) == ("FAILED", 1, "INFRA", None)
    assert events(app, boom) == [] and proc(app, behind).status == "PENDING"
    assert gates(app, "K2") == [(1, "B2")]
    assert all(is_marked(app, i) for i in before) and not is_marked(app, behind)
