"""A state database lost and re-created empty does not silently adopt the mailbox (US-03 AC8, L12).

From inside an empty, migrated state database a first installation and a wiped state look alike.
What tells them apart is the mailbox: a mailbox processed until recently means the state was lost.
The pump then refuses (exit 4, like a restore from an older backup) and names the two ways on:
``msgx recover`` (replay the processed history) or ``msgx adopt`` (audited: this is a first
installation after all). Real PostgreSQL and MariaDB; the clock starts at the real time, so the
CLI's own clock sees the marks the test's pump wrote as recent.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from msgx_engine.app import App
from msgx_engine.clock import ManualClock
from msgx_engine.pipeline.intake import StateLost
from tests.builders import gtdt
from tests.pipeline_support import drain_now, flight_count, gates, is_marked, proc


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC).replace(microsecond=0))


def _history(app) -> list[int]:
    """Two flights processed and marked in the mailbox: the history a lost state database knew."""
    ids = [app.mailbox.put(gtdt("W1", (1, "A1"))), app.mailbox.put(gtdt("W2", (1, "B1")))]
    drain_now(app)
    assert all(is_marked(app, i) for i in ids)
    return ids


def test_a_wiped_state_database_is_refused_until_an_audited_adopt(app, clock, pg_dbs, monkeypatch, cli_run):
    """US-03 AC8, L12: the state database re-created empty on a mailbox processed minutes ago: the
    pump registers and writes nothing and refuses (exit 4) naming ``msgx recover`` and ``msgx adopt``;
    a later FLOP is not applied to a skeleton. ``msgx adopt`` (operator, reason, audited) takes the
    processed rows as history; the pump then goes on. A second adopt is refused (exit 2)."""
    history = _history(app)
    wiped = App.from_settings(replace(app.settings, db_url=pg_dbs.fresh()), clock=clock)
    try:
        later = wiped.mailbox.put(gtdt("W1", (1, "Z9")))
        with pytest.raises(StateLost) as refused:
            drain_now(wiped)
        assert f"up to id {history[-1]}" in str(refused.value)
        assert "msgx recover" in str(refused.value) and "msgx adopt" in str(refused.value)
        with wiped.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM proc_state")).scalar_one() == 0
            assert conn.execute(text("SELECT high_water FROM intake_state")).scalar_one() is None
        assert flight_count(wiped) == 0 and not is_marked(wiped, later)

        monkeypatch.setenv("MSGX_DB_URL", wiped.settings.db_url)         # msgx pointed at the empty database
        code, _, err = cli_run("pump", "--drain")
        assert code == 4 and "msgx adopt --operator NAME --reason TEXT" in err

        code, out, _ = cli_run("adopt", "--operator", "ops.li", "--reason",
                               "first installation, taking over from the old adapter")
        assert code == 0 and f"up to id {history[-1]}" in out
        with wiped.engine.connect() as conn:
            (operator, selection), = conn.execute(text(
                "SELECT operator, selection FROM operator_audit WHERE action = 'adopt'")).fetchall()
            assert operator == "ops.li" and json.loads(selection) == {"high_water": history[-1]}
            assert conn.execute(text("SELECT high_water FROM intake_state")).scalar_one() == history[-1]

        drain_now(wiped)
        assert proc(wiped, later).status == "SUCCEEDED" and is_marked(wiped, later)
        assert gates(wiped, "W1") == [(1, "Z9")]
        code, _, err = cli_run("adopt", "--operator", "ops.li", "--reason", "again")
        assert code == 2 and "already accounts for the mailbox" in err
    finally:
        wiped.dispose()


def test_a_wiped_state_database_gets_its_history_back_with_recover(app, clock, pg_dbs, monkeypatch, cli_run):
    """US-03 AC8, L12: the refusal's first way on: ``msgx recover --apply`` replays the processed
    history into the empty database (every flight back with its gates), then the later message."""
    history = _history(app)
    wiped = App.from_settings(replace(app.settings, db_url=pg_dbs.fresh()), clock=clock)
    try:
        later = wiped.mailbox.put(gtdt("W1", (1, "Z9")))
        monkeypatch.setenv("MSGX_DB_URL", wiped.settings.db_url)
        code, _, err = cli_run("recover", "--apply", "--operator", "ops.li", "--reason", "state database lost")
        assert code == 0, err
        assert [proc(wiped, i).status for i in (*history, later)] == ["SUCCEEDED"] * 3
        assert gates(wiped, "W1") == [(1, "Z9")] and gates(wiped, "W2") == [(1, "B1")]
    finally:
        wiped.dispose()
