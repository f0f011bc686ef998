"""Replay and skip (US-10 AC1-AC5, D24): preview, audited apply, refusals, stale flights.

The infrastructure fault is real (``tests/fault_support.py``: a trigger that fails transaction 1
inside PostgreSQL until it is "fixed"). The operator's commands run as the ``msgx`` console
script against the test's databases.
"""

from __future__ import annotations

import subprocess

from msgx_engine.operations.replay import Replayer
from msgx_engine.store import audit
from msgx_engine.store.queue_selection import Selection
from tests.builders import envelope, gtdt
from tests.conftest import MSGX_BIN
from tests.fault_support import fault_fixture, sql, until_dead  # noqa: F401  (the `fault` fixture)
from tests.pipeline_support import drain_now, events, gates, history, proc


def msgx(env_for, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MSGX_BIN, *args], env=env_for(), capture_output=True, text=True, timeout=120)


def fingerprint(app) -> list:
    """Everything a replay may change, in one comparable value."""
    return [sql(app, f"SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {table} t")
            for table in ("proc_state", "proc_state_hst", "backfill_todo", "msg_event", "flight_schd",
                          "operator_audit", "operator_audit_item")]


def audit_rows(app):
    with app.engine.connect() as conn:
        return [(e, audit.items_of(conn, e.audit_id)) for e in audit.entries(conn)]


def test_replay_infrastructure_dead_after_the_fix_applies_once_and_is_audited(app, clock, env_for, fault):
    """US-10 AC1-AC3: a message dead-lettered by an infrastructure fault is previewed (nothing
    changes), then replayed with operator and reason after the fault is fixed: PENDING with
    attempts reset, registration time and error history kept; the pump then applies its state
    exactly once; the request and its per-message result are in the audit trail."""
    fault()
    m = app.mailbox.put(gtdt("RP1", (1, "A1")))
    until_dead(app, clock, m)
    dead = proc(app, m)
    assert (dead.status, dead.reason, dead.error_class, dead.attempts) == ("DEAD", "exhausted", "INFRA", 5)
    assert gates(app, "RP1") == []
    fault.fix()

    before = fingerprint(app)
    shown = msgx(env_for, "replay", "--ids", str(m))
    assert shown.returncode == 0, shown.stderr
    assert "DEAD(exhausted)" in shown.stdout and "No space left on device" in shown.stdout
    assert "flight RP1: absent" in shown.stdout and "verdict: replayable" in shown.stdout
    assert fingerprint(app) == before, "a preview changed something"

    done = msgx(env_for, "replay", "--ids", str(m), "--apply", "--operator", "alice", "--reason", "disk replaced")
    assert done.returncode == 0, done.stderr
    row = proc(app, m)
    assert (row.status, row.attempts, row.next_attempt_at, row.terminal_at) == ("PENDING", 0, None, None)
    assert row.created_at == dead.created_at and row.requeued_at is not None
    assert row.error_class == "INFRA" and "No space left" in row.error_detail
    [(entry, items)] = audit_rows(app)
    assert (entry.operator, entry.action, entry.reason, entry.selection["ids"]) == ("alice", "replay",
                                                                                     "disk replaced", [m])
    assert [(i.msg_id, i.before_status, i.after_status, i.result) for i in items] == [
        (m, "DEAD", "PENDING", "requeued")]

    drain_now(app)
    assert proc(app, m).status == "SUCCEEDED"
    assert gates(app, "RP1") == [(1, "A1")]
    assert [(e.topic, e.state_version) for e in events(app, m)] == [("msg", 1), ("schd", 1)]
    statuses = [h[0] for h in history(app, m)]
    assert statuses == ["FAILED"] * 4 + ["DEAD", "PENDING", "SUCCEEDED"]

    again = msgx(env_for, "replay", "--ids", str(m), "--apply", "--operator", "alice", "--reason", "twice")
    assert again.returncode == 2 and "refused" in again.stderr
    assert proc(app, m).status == "SUCCEEDED" and len(events(app, m)) == 2
    entry, items = audit_rows(app)[0]
    assert items[0].result == "refused: SUCCEEDED is not replayable" and entry.outcome["requeued"] == 0


def test_malformed_is_refused_state_unchanged_exit_2(app, env_for):
    """US-10 AC2: DEAD(malformed) may not be replayed: refused with its reason, exit 2, nothing
    re-queued; the refused request is audited with the per-message reason."""
    m = app.mailbox.put("<MSG><META><SNDR>AODB</SNDR>")
    drain_now(app)
    assert (proc(app, m).status, proc(app, m).reason) == ("DEAD", "malformed")
    before = proc(app, m)
    done = msgx(env_for, "replay", "--status", "DEAD", "--select-reason", "malformed", "--apply",
                "--operator", "bob", "--reason", "try it")
    assert done.returncode == 2
    assert "refused: malformed" in done.stdout and "nothing re-queued" in done.stderr
    assert proc(app, m) == before
    [(entry, items)] = audit_rows(app)
    assert [(i.before_status, i.after_status, i.result) for i in items] == [("DEAD", "DEAD", "refused: malformed")]
    assert entry.outcome["requeued"] == 0 and entry.outcome["refused"] == 1


def test_reason_is_only_the_audit_text_and_select_reason_selects(app, cli_run):
    """US-10 AC1/AC4: `--reason` is the operator's audit text and never a selection: a preview
    given `--reason unsupported` (the old spelling) is refused naming `--select-reason`, which
    selects in a preview and an apply alike; an apply records the selection and the reason apart."""
    unsupported = app.mailbox.put(envelope("ZZZZ", "XXXX", "\t<X/>\n"))
    ignored = app.mailbox.put(envelope("LDM", "NONE", "<LDM/>\n"))
    malformed = app.mailbox.put("<MSG><META><SNDR>AODB</SNDR>")
    drain_now(app)
    assert proc(app, ignored).status == "SKIPPED" and proc(app, ignored).reason != "unsupported"

    code, out, err = cli_run("replay", "--status", "SKIPPED", "--reason", "unsupported")
    assert code == 2 and out == "" and "--select-reason" in err and "audit text" in err
    code, out, err = cli_run("replay", "--status", "SKIPPED", "--select-reason", "unsupported")
    assert code == 0, err
    assert f"mailbox id {unsupported}:" in out and f"mailbox id {ignored}:" not in out
    assert "1 message(s) selected" in out

    code, out, err = cli_run("replay", "--status", "DEAD", "--select-reason", "malformed", "--apply",
                             "--operator", "bob", "--reason", "unsupported")
    assert code == 2 and f"mailbox id {malformed}:" in out
    [(entry, items)] = audit_rows(app)
    assert entry.reason == "unsupported" and entry.selection["reasons"] == ["malformed"]
    assert [i.msg_id for i in items] == [malformed]


def test_mixed_selection_is_all_or_nothing(app, clock, env_for, fault):
    """US-10 AC2/AC4: one refused message in the selection refuses the whole apply (exit 2), so a
    replay never does half of what the operator previewed."""
    fault()
    m = app.mailbox.put(gtdt("RP2", (1, "B1")))
    until_dead(app, clock, m)
    fault.fix()
    bad = app.mailbox.put("not xml at all")
    drain_now(app)
    done = msgx(env_for, "replay", "--ids", f"{m},{bad}", "--apply", "--operator", "bob", "--reason", "both")
    assert done.returncode == 2
    assert proc(app, m).status == "DEAD" and proc(app, bad).status == "DEAD"
    [(_, items)] = audit_rows(app)
    assert {i.msg_id: i.result for i in items} == {m: "not replayed: the request was refused",
                                                   bad: "refused: malformed"}


def test_stale_flight_blocks_apply_unless_forced(app, clock, env_for, fault):
    """US-10 AC4, FS §7: after a message died, a later message changed the same flight; the preview
    says so (version now vs the one the message saw), --apply is refused (exit 2, state unchanged)
    until --force-stale gives a reason; forced, the replayed content lands on top, once."""
    first = app.mailbox.put(gtdt("RP3", (1, "C1")))
    drain_now(app)
    fault("RP3")
    m = app.mailbox.put(gtdt("RP3", (1, "C2")))
    until_dead(app, clock, m)
    fault.fix()
    later = app.mailbox.put(gtdt("RP3", (1, "C3")))
    drain_now(app)
    assert proc(app, later).status == "SUCCEEDED" and gates(app, "RP3") == [(1, "C3")]

    shown = msgx(env_for, "replay", "--ids", str(m))
    assert shown.returncode == 0
    assert ("flight RP3: version now 2, the message saw version 1; later messages have changed this flight "
            f"since (1, last mailbox id {later})") in shown.stdout
    assert "--force-stale" in shown.stdout and first < m < later

    before = fingerprint(app)
    blocked = msgx(env_for, "replay", "--ids", str(m), "--apply", "--operator", "carol", "--reason", "retry")
    assert blocked.returncode == 2 and "later messages have changed" in blocked.stderr
    after = fingerprint(app)
    assert after[:5] == before[:5], "a refused replay changed the queue or the flights"
    [(_, items)] = audit_rows(app)
    assert items[0].result == "blocked: stale (RP3)"

    forced = msgx(env_for, "replay", "--ids", str(m), "--apply", "--operator", "carol", "--reason", "retry",
                  "--force-stale", "C2 is the gate the AODB meant")
    assert forced.returncode == 0, forced.stderr
    drain_now(app)
    assert proc(app, m).status == "SUCCEEDED" and gates(app, "RP3") == [(1, "C2")]
    assert [e.state_version for e in events(app, m)] == [3, 3]
    entry, items = audit_rows(app)[0]
    assert entry.selection["force_stale"] == "C2 is the gate the AODB meant"
    assert items[0].result == "requeued (stale, forced: C2 is the gate the AODB meant)"


def test_replayed_message_gets_a_fresh_deadline(app, clock, fault):
    """US-10 AC3 (Q6): the head deadline of a replayed message counts from its re-queue, not from its
    registration hours ago, so the replay gets its retries instead of dying at the second attempt."""
    fault()
    m = app.mailbox.put(gtdt("RP4", (1, "D1")))
    until_dead(app, clock, m)
    clock.advance(3600)
    replayer = Replayer(app.engine, app.mailbox)
    result = replayer.apply(Selection(ids=(m,)), operator="dave", reason="deadline check", now=clock.now())
    assert result.applied and result.requeued == (m,)
    for attempt in (1, 2, 3):
        drain_now(app)
        row = proc(app, m)
        assert (row.status, row.attempts) == ("FAILED", attempt)
        clock.advance(60)
    fault.fix()
    drain_now(app)
    assert proc(app, m).status == "SUCCEEDED" and gates(app, "RP4") == [(1, "D1")]


def test_no_replay_without_a_selection(app, env_for):
    """US-10 AC4: there is no "replay everything" entry point."""
    done = msgx(env_for, "replay", "--apply", "--operator", "eve", "--reason", "all of it")
    assert done.returncode == 2 and "a selection is required" in done.stderr
    assert audit_rows(app) == []


def test_skip_ends_an_open_message_audited_and_the_queue_moves_on(app, clock, env_for, fault):
    """D24, INV-3: an open message that cannot proceed holds the head until an operator skips it:
    SKIPPED(operator_skip), history, mark owed, audit row; the next message then runs. Skipping a
    terminal message is refused (exit 2)."""
    fault("RP5")
    m = app.mailbox.put(gtdt("RP5", (1, "E1")))
    n = app.mailbox.put(gtdt("RP6", (1, "E2")))
    drain_now(app)
    assert proc(app, m).status == "FAILED" and proc(app, n).status == "PENDING"

    done = msgx(env_for, "skip", str(m), "--operator", "frank", "--reason", "the AODB resent it as a new message")
    assert done.returncode == 0, done.stderr
    row = proc(app, m)
    assert (row.status, row.reason) == ("SKIPPED", "operator_skip") and "frank" in row.error_detail
    assert history(app, m)[-1][:2] == ("SKIPPED", "operator_skip")
    [(entry, items)] = audit_rows(app)
    assert (entry.action, entry.operator) == ("skip", "frank")
    assert [(i.before_status, i.after_status, i.result) for i in items] == [("FAILED", "SKIPPED", "skipped")]

    clock.advance(60)
    drain_now(app)
    assert proc(app, n).status == "SUCCEEDED" and gates(app, "RP5") == []
    assert app.mailbox.processed_at([m])[m] is not None

    again = msgx(env_for, "skip", str(n), "--operator", "frank", "--reason", "oops")
    assert again.returncode == 2 and "already SUCCEEDED" in again.stderr
    assert proc(app, n).status == "SUCCEEDED" and len(audit_rows(app)) == 2
