"""FS §3.3's ledger example (steps 1-5) and FS §4.2's DNLD example, end to end through the pump."""

from __future__ import annotations

from datetime import date

from snapshot_builders import day_package, events, flights, ledger, members, pump, query, status
from sqlalchemy import text

D9, D10 = date(2026, 9, 9), date(2026, 9, 10)


def _replay(app, msg_id: int) -> None:
    """Run the same mailbox row through the protocol again (a manual replay: its proc_state is
    reopened, so identity binding does not stop it and the handler runs)."""
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE proc_state SET status = 'PENDING', applied_at = NULL, terminal_at = NULL "
                          "WHERE msg_id = :m"), {"m": msg_id})
    pump(app)


def test_fs_3_3_example_steps_1_to_5(app):
    """FS §3.3 example table, exactly: ledger rows, member lists, flights, events (US-06 AC3/AC5,
    INV-15b, D2 soft delete, D3 cross-day protection, replay short-circuit)."""
    # Step 1: M1, 9/9 snapshot {A, B}
    (m1,) = pump(app, day_package(["A", "B"], 9))
    assert status(app, m1) == ("SUCCEEDED", None)
    assert ledger(app) == {D9: (1, m1)}
    assert members(app) == {D9: {"A", "B"}}
    assert flights(app) == {"A": (D9, False, 1), "B": (D9, False, 1)}
    assert events(app, m1) == [("A", "schd", "state", 1), ("B", "schd", "state", 1)]

    # Step 2: M2, 9/9 snapshot {A, C}: B still belongs to 9/9 -> deleted with a tombstone
    (m2,) = pump(app, day_package(["A", "C"], 9))
    assert ledger(app) == {D9: (2, m2)}
    assert members(app) == {D9: {"A", "C"}}
    assert flights(app) == {"A": (D9, False, 2), "B": (D9, True, 2), "C": (D9, False, 1)}
    assert events(app, m2) == [("A", "schd", "state", 2), ("C", "schd", "state", 1),
                               ("B", "schd", "tombstone", 2)]

    # Step 3: M3, 9/10 snapshot {C}: C moves to 9/10; 9/9's ledger and list stay
    (m3,) = pump(app, day_package(["C"], 10))
    assert ledger(app) == {D9: (2, m2), D10: (1, m3)}
    assert members(app) == {D9: {"A", "C"}, D10: {"C"}}
    assert flights(app)["C"] == (D10, False, 2)
    assert events(app, m3) == [("C", "schd", "state", 2)]

    # Step 4: M4, 9/9 snapshot {A}: candidate C belongs to 9/10 now -> kept, no tombstone
    (m4,) = pump(app, day_package(["A"], 9))
    assert ledger(app) == {D9: (3, m4), D10: (1, m3)}
    assert members(app) == {D9: {"A"}, D10: {"C"}}
    assert flights(app) == {"A": (D9, False, 3), "B": (D9, True, 2), "C": (D10, False, 2)}
    assert events(app, m4) == [("A", "schd", "state", 3)]

    # Step 5: M4 again: it is 9/9's last message -> nothing written, still SUCCEEDED
    before = (ledger(app), members(app), flights(app), query(app, "SELECT count(*) FROM msg_event"))
    _replay(app, m4)
    assert status(app, m4) == ("SUCCEEDED", None)
    assert (ledger(app), members(app), flights(app), query(app, "SELECT count(*) FROM msg_event")) == before
    assert events(app, m4) == [("A", "schd", "state", 3)]
    assert query(app, "SELECT count(*) FROM proc_state_hst WHERE msg_id = :m AND status = 'SUCCEEDED'",
                 m=m4) == [(2,)]
    assert query(app, "SELECT count(*) FROM backfill_todo WHERE msg_id = :m", m=m4) == [(1,)]


def test_fs_4_2_dnld_example_version_7_to_8(app):
    """FS §4.2 DNLD example: the 9/9 generation at version 7 with {CA100, CZ300}; a DNLD with
    {CA100, MU201} gives version 8, CZ300 soft-deleted with a tombstone, CA100 rewritten,
    MU201 created, one schd event each, SUCCEEDED and backfilled (US-06 AC3/AC4, INV-15b)."""
    ids = pump(app, *[day_package(["CA100", "CZ300"], 9) for _ in range(7)])
    assert ledger(app) == {D9: (7, ids[-1])}
    assert flights(app) == {"CA100": (D9, False, 7), "CZ300": (D9, False, 7)}

    (m,) = pump(app, day_package(["CA100", "MU201"], 9))
    assert status(app, m) == ("SUCCEEDED", None)
    assert ledger(app) == {D9: (8, m)}
    assert members(app) == {D9: {"CA100", "MU201"}}
    assert flights(app) == {"CA100": (D9, False, 8), "MU201": (D9, False, 1), "CZ300": (D9, True, 8)}
    assert events(app, m) == [("CA100", "schd", "state", 8), ("MU201", "schd", "state", 1),
                              ("CZ300", "schd", "tombstone", 8)]
    assert query(app, "SELECT payload FROM msg_event WHERE msg_id = :m AND flid = 'CZ300'", m=m) == [
        ('{"DELETED":true,"FLID":"CZ300","STATE_VERSION":8}',)]
    assert query(app, "SELECT fday, version, written, deleted, kept_later FROM schd_gen_run WHERE msg_id = :m",
                 m=m) == [(D9, 8, 2, 1, 0)]
    assert app.mailbox.processed_at([m])[m] is not None
