"""Identity bindings within a window (D26, INV-9, US-03 AC3), through the real pump (PostgreSQL +
MariaDB, ManualClock as the registration clock), with transactions folded and split.

The AODB's SEQN wraps at 999999 and the samples reuse SEQN 1243: the same SNDR|TYPE|STYP|SEQN
dedupes only within MSGX_IDENTITY_WINDOW (default 24 h of registration time); after it, the same
identity is a new message. The binding key is a fixed-size hash, so no identity overflows its index.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import text

from msgx_engine.app import App
from msgx_engine.store import queue
from msgx_engine.store.identity import identity_hash
from msgx_engine.store.queue import Bind, HistoryRow, Status
from tests.builders import envelope, gtdt
from tests.pipeline_support import drain_now, gates, proc


@pytest.fixture(params=["folded", "split"])
def pump_app(request, settings, clock):
    """The App with transactions folded (no post-commit step) or split (MSGX_SPLIT_TRANSACTIONS):
    the identity binds in the terminal status write or in transaction 1's ``applied_at`` write."""
    app = App.from_settings(replace(settings, split_transactions=request.param == "split"), clock=clock)
    yield app
    app.dispose()


def test_d26_same_identity_after_the_window_is_a_new_message(pump_app, clock):
    """D26: SEQN 1243 bound at T; the same identity with other content 1 s inside 24 h is
    SKIPPED(identity_conflict); registered 24 h later it is a new message, applied, and the binding
    moves to it; its own duplicate inside the new window is then SKIPPED(duplicate, dup_of it)."""
    app = pump_app
    first = app.mailbox.put(gtdt("W1", (1, "A1"), seqn=1243))
    drain_now(app)
    clock.advance(24 * 3600 - 1)
    inside = app.mailbox.put(gtdt("W1", (1, "B1"), seqn=1243))
    drain_now(app)
    assert (proc(app, inside).status, proc(app, inside).reason, proc(app, inside).dup_of) == (
        "SKIPPED", "identity_conflict", first)
    assert gates(app, "W1") == [(1, "A1")]

    clock.advance(1)                        # registered exactly 24 h after the first
    after = app.mailbox.put(gtdt("W1", (1, "C1"), seqn=1243))
    drain_now(app)
    assert (proc(app, after).status, proc(app, after).dup_of) == ("SUCCEEDED", None)
    assert gates(app, "W1") == [(1, "C1")]
    again = app.mailbox.put(gtdt("W1", (1, "C1"), seqn=1243, dttm="20210123060000"))
    drain_now(app)
    assert (proc(app, again).status, proc(app, again).reason, proc(app, again).dup_of) == (
        "SKIPPED", "duplicate", after)
    with app.engine.connect() as conn:
        bound = conn.execute(text("SELECT identity, msg_id FROM msg_identity")).all()
    assert [tuple(r) for r in bound] == [("AODB|FLOP|GTDT|1243", after)]


def test_d26_the_window_is_configurable(settings, clock):
    """D26, DESIGN §4: MSGX_IDENTITY_WINDOW=90m: 91 minutes later the same identity is new."""
    app = App.from_settings(replace(settings, identity_window=timedelta(minutes=90)), clock=clock)
    try:
        app.mailbox.put(gtdt("W2", (1, "A1"), seqn=7))
        drain_now(app)
        clock.advance(91 * 60)
        later = app.mailbox.put(gtdt("W2", (1, "B1"), seqn=7))
        drain_now(app)
        assert proc(app, later).status == "SUCCEEDED" and gates(app, "W2") == [(1, "B1")]
    finally:
        app.dispose()


def test_d26_a_retry_of_the_same_row_keeps_its_binding(app, clock):
    """US-03 AC3 (自身重试保留绑定): a message whose first attempt fails binds on its retry; the
    binding is its own, so the retry succeeds rather than clashing with itself."""
    failures = []

    def fail_once(conn, msg_id, states):
        if not failures:
            failures.append(msg_id)
            raise ConnectionError("projection unavailable")

    app.post_commit.append(fail_once)
    m = app.mailbox.put(gtdt("W3", (1, "A1"), seqn=99))
    drain_now(app)
    assert proc(app, m).status == "FAILED"
    clock.advance(1)
    drain_now(app)
    assert proc(app, m).status == "SUCCEEDED" and proc(app, m).identity_key == "AODB|FLOP|GTDT|99"


def test_d26_an_identity_of_any_length_binds_under_a_fixed_size_key(app, clock):
    """D26 and the robustness finding (an oversized identity crashed every drain: "index row size
    exceeds btree maximum"): the binding key is the 64-character SHA-256 of the identity, so a
    100,000-character identity binds, and the readable text stays for display."""
    long_identity = "AODB|ZZZZ|ZZZZ|" + "9" * 100_000
    m = app.mailbox.put(envelope("ZZZZ", "ZZZZ", "<X/>\n", seqn=1))
    drain_now(app)                        # registers and settles the row (SKIPPED unsupported)
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE proc_state SET status = 'PENDING', terminal_at = NULL WHERE msg_id = :m"), {"m": m})
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        assert queue.write_status(conn, m, {"status": Status.SUCCEEDED, "identity_key": long_identity},
                                  terminal=True, history=HistoryRow(Status.SUCCEEDED), now=clock.now(), pid=pid,
                                  bind=Bind(long_identity, "h", timedelta(hours=24)))
        key, shown = conn.execute(text("SELECT identity_hash, identity FROM msg_identity WHERE identity = :i"),
                                  {"i": long_identity}).one()
    assert key == identity_hash(long_identity) and len(key) == 64 and shown == long_identity
