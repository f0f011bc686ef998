"""The pump tells its inline dispatcher the moment a commit has made messages
terminal, i.e. released their events (INV-17b: events are released with the terminal status),
alone, in a folded group (P10/P13) and in a group of two-transaction messages (P12). Seen from
another connection, every call finds more terminal messages and released events than the one
before it (never a call before its commit, never one for nothing), and the last finds them all."""

from __future__ import annotations

import pytest
from builders import gtdt
from sqlalchemy import text

from msgx_engine.app import App
from msgx_engine.config import Settings
from msgx_engine.pipeline.pump import PumpOptions

MODES = {"alone": ({"group_messages": 1}, {}), "folded group": ({}, {}),
         "two-transaction group": ({}, {"split_transactions": True})}


@pytest.mark.parametrize("mode", list(MODES))
def test_issue16_on_release_follows_each_commit_that_releases_events(pg_dbs, mysql_dbs, clock, tmp_path, mode):
    options, settings = MODES[mode]
    app = App.from_settings(Settings(db_url=pg_dbs.fresh(), mailbox_url=mysql_dbs.fresh(), kafka_bootstrap=None,
                                     redis_url=None, home=tmp_path, **settings), clock=clock)
    seen: list[tuple[int, int]] = []

    def on_release() -> None:
        with app.engine.connect() as other:          # what a dispatcher's own connection finds
            seen.append(tuple(other.execute(text(
                "SELECT (SELECT count(*) FROM proc_state WHERE status = 'SUCCEEDED'),"
                " (SELECT count(*) FROM msg_event WHERE released_at IS NOT NULL)")).one()))

    try:
        for i in range(12):
            app.mailbox.put(gtdt(f"WK{i % 4}", (1, f"G{i}")))
        app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01, **options), on_release=on_release).run()
    finally:
        app.dispose()
    assert seen, "the pump never woke the dispatcher"
    assert all(b[0] > a[0] and b[1] > a[1] for a, b in zip(seen, seen[1:], strict=False)), seen
    assert seen[0][0] > 0 and seen[0][1] > 0 and seen[-1][0] == 12
    if mode == "alone":
        assert len(seen) == 12          # one commit per message
    else:
        assert len(seen) < 12           # one per group commit
