"""Dead letters with a lifecycle (OPS-2, US-10, US-11): ``msgx acknowledge`` closes dead and
unsupported messages that need no replay, audited, all or nothing; a replay clears an
acknowledgement; archiving keeps what waits for an operator until it is acknowledged, replayed or
skipped.

The commands run in process (``msgx_engine.cli.main.main``) against the test's databases; ``msgx archive`` uses the
database's clock, so the messages registered at the ManualClock's 2026-01-01 are months old to it.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from msgx_engine.store import audit
from tests.builders import envelope, gtdt
from tests.fault_support import fault_fixture, sql, until_dead  # noqa: F401  (the `fault` fixture)
from tests.pipeline_support import drain_now, proc, register

MALFORMED = "<MSG><META><SNDR>AODB</SNDR>"
UNSUPPORTED = envelope("ZZZZ", "XXXX", "\t<X/>\n")


def waiting_dead(app) -> list[int]:
    """The dead letters the monitor counts: DEAD and not acknowledged."""
    return [r[0] for r in sql(app, "SELECT msg_id FROM proc_state WHERE status = 'DEAD' "
                                   "AND acknowledged_at IS NULL ORDER BY msg_id")]


def state_rows(app) -> list:
    return sql(app, "SELECT * FROM proc_state ORDER BY msg_id")


def audits(app, action: str):
    with app.engine.connect() as conn:
        return [(e, audit.items_of(conn, e.audit_id)) for e in audit.entries(conn, action=action)]


def test_acknowledge_closes_a_malformed_dead_letter_audited(app, cli_run):
    """OPS-2, US-10: a DEAD(malformed) message can never be replayed; acknowledged with operator
    and reason it leaves the waiting dead letters (acknowledged_at/by set), keeps its status,
    reason, error and history (still queryable), and the request is one audit row with its item."""
    m = app.mailbox.put(MALFORMED)
    drain_now(app)
    before = proc(app, m)
    assert (before.status, before.reason) == ("DEAD", "malformed") and waiting_dead(app) == [m]
    history = sql(app, f"SELECT * FROM proc_state_hst WHERE msg_id = {m} ORDER BY id")

    code, out, err = cli_run("acknowledge", str(m), "--operator", "alice", "--reason", "garbage from a test sender")
    assert code == 0, err
    assert f"mailbox id {m}: DEAD(malformed)" in out and "acknowledged 1 message(s)" in out
    after = proc(app, m)
    assert after.acknowledged_by == "alice" and after.acknowledged_at is not None
    assert (after.status, after.reason, after.error_class, after.error_detail, after.terminal_at) == (
        before.status, before.reason, before.error_class, before.error_detail, before.terminal_at)
    assert sql(app, f"SELECT * FROM proc_state_hst WHERE msg_id = {m} ORDER BY id") == history
    assert waiting_dead(app) == []
    [(entry, items)] = audits(app, "acknowledge")
    assert (entry.operator, entry.reason, entry.selection["ids"]) == ("alice", "garbage from a test sender", [m])
    assert entry.outcome["acknowledged"] == 1
    assert [(i.msg_id, i.before_status, i.after_status, i.result) for i in items] == [
        (m, "DEAD", "DEAD", "acknowledged")]


def test_acknowledge_takes_unsupported_messages_too(app, cli_run):
    """OPS-2: a SKIPPED(unsupported) message also waits for an operator (archiving keeps it); when
    the type will never be handled it is acknowledged the same way."""
    m = app.mailbox.put(UNSUPPORTED)
    drain_now(app)
    assert (proc(app, m).status, proc(app, m).reason) == ("SKIPPED", "unsupported")
    code, out, err = cli_run("acknowledge", str(m), "--operator", "bob", "--reason", "type retired by the AODB")
    assert code == 0, err
    assert proc(app, m).acknowledged_by == "bob" and proc(app, m).status == "SKIPPED"


def test_refusals_exit_2_name_each_id_and_change_nothing(app, cli_run):
    """OPS-2, US-10 AC2: a PENDING, a SUCCEEDED, an unknown and an already acknowledged id are
    each refused with exit 2 and a message naming the id and why; a request mixing a good dead
    letter with a refused id acknowledges nothing (all or nothing). Refused requests are audited,
    the queue is unchanged."""
    done = app.mailbox.put(gtdt("AK1", (1, "A1")))
    dead = app.mailbox.put(MALFORMED)
    acked = app.mailbox.put(MALFORMED)
    drain_now(app)
    pending = app.mailbox.put(gtdt("AK2", (1, "A2")))
    register(app)
    assert proc(app, pending).status == "PENDING" and proc(app, done).status == "SUCCEEDED"
    assert cli_run("acknowledge", str(acked), "--operator", "alice", "--reason", "first")[0] == 0
    unknown = 987654
    before = state_rows(app)

    cases = {pending: "PENDING is still being processed", done: "SUCCEEDED does not wait for an operator",
             unknown: "no such message", acked: "already acknowledged by alice"}
    for msg_id, why in cases.items():
        code, out, err = cli_run("acknowledge", str(msg_id), "--operator", "bob", "--reason", "try")
        assert code == 2, (msg_id, out, err)
        assert f"mailbox id {msg_id}" in err and why in err, err
        assert "nothing acknowledged" in err
    code, out, err = cli_run("acknowledge", f"{dead},{done}", "--operator", "bob", "--reason", "both")
    assert code == 2 and f"mailbox id {done}" in err and f"mailbox id {dead}:" not in err
    assert state_rows(app) == before
    assert waiting_dead(app) == [dead]
    refused = [(e, items) for e, items in audits(app, "acknowledge") if e.operator == "bob"]
    assert len(refused) == 5 and all(e.outcome["acknowledged"] == 0 for e, _ in refused)
    mixed_items = {i.msg_id: i.result for i in refused[0][1]}
    assert mixed_items == {dead: "not acknowledged: the request was refused",
                           done: "refused: SUCCEEDED does not wait for an operator (only dead and unsupported "
                                 "messages do)"}


def test_acknowledge_without_operator_or_reason_is_a_usage_error(app, cli_run):
    """OPS-2: operator and reason are required (argparse usage error, exit 2); nothing changes."""
    m = app.mailbox.put(MALFORMED)
    drain_now(app)
    for argv in (("acknowledge", str(m), "--reason", "x"), ("acknowledge", str(m), "--operator", "x")):
        with pytest.raises(SystemExit) as exc:
            cli_run(*argv)
        assert exc.value.code == 2
    assert cli_run("acknowledge", str(m), "--operator", " ", "--reason", "x")[0] == 2
    assert proc(app, m).acknowledged_at is None and audits(app, "acknowledge") == []


def test_replay_clears_the_acknowledgement(app, clock, fault, cli_run):
    """OPS-2, US-10 AC2/AC3: a message that decoded and then ran out of retries keeps its TYPE/STYP;
    acknowledging a replayable DEAD(exhausted) message is refused (exit 2,
    nothing changed, audited, the reason and the replay preview named) unless the operator gives
    --even-if-replayable; an acknowledged one may still be replayed, the replay clears its
    acknowledgement (it is open again, and dead again it would wait anew) and it then succeeds."""
    fault()
    m = app.mailbox.put(gtdt("AK3", (1, "B1")))
    until_dead(app, clock, m)
    fault.fix()
    before = state_rows(app)
    code, out, err = cli_run("acknowledge", str(m), "--operator", "alice", "--reason", "pasted from status")
    assert code == 2, (out, err)
    assert f"mailbox id {m}: DEAD(exhausted) FLOP/GTDT" in err and "replayable once its cause is fixed" in err
    assert (proc(app, m).msg_type, proc(app, m).msg_styp) == ("FLOP", "GTDT")   # decoded, then failed: not ?/?
    assert f"msgx replay --ids {m}" in err and "--even-if-replayable" in err and "nothing acknowledged" in err
    assert state_rows(app) == before and waiting_dead(app) == [m]
    [(entry, _)] = audits(app, "acknowledge")
    assert entry.outcome["acknowledged"] == 0
    assert cli_run("acknowledge", str(m), "--operator", "alice", "--reason", "later", "--even-if-replayable")[0] == 0
    assert proc(app, m).acknowledged_at is not None
    code, out, err = cli_run("replay", "--ids", str(m), "--apply", "--operator", "alice", "--reason", "fixed after all")
    assert code == 0, err
    row = proc(app, m)
    assert (row.status, row.acknowledged_at, row.acknowledged_by) == ("PENDING", None, None)
    drain_now(app)
    assert proc(app, m).status == "SUCCEEDED"


def test_archive_keeps_what_waits_for_an_operator_until_it_is_handled(app, clock, fault, cli_run):
    """OPS-2, US-11: past the retention, an unacknowledged DEAD(malformed), DEAD(exhausted) and
    SKIPPED(unsupported) message stay online with their history (the dry run and the run say how
    many were kept and why) while an ignored message is archived; once acknowledged, or replayed
    to SUCCEEDED, they are archived normally, the acknowledgement kept in the archive."""
    malformed = app.mailbox.put(MALFORMED)
    unsupported = app.mailbox.put(UNSUPPORTED)
    ignored = app.mailbox.put(envelope("LDM", "NONE", "<LDM/>\n"))
    drain_now(app)
    fault()
    exhausted = app.mailbox.put(gtdt("AK4", (1, "C1")))
    until_dead(app, clock, exhausted)
    fault.fix()
    waiting = {malformed, unsupported, exhausted}

    code, out, err = cli_run("archive", "--older-than", "0s", "--dry-run")
    assert code == 0, err
    assert "kept 2 dead message(s) that wait for an operator" in out
    assert "kept 1 message(s) of a type this version does not handle" in out
    code, out, err = cli_run("archive", "--older-than", "0s")
    assert code == 0, err
    assert "kept 2 dead message(s)" in out
    online = {r[0] for r in sql(app, "SELECT msg_id FROM proc_state")}
    assert online == waiting
    assert {r[0] for r in sql(app, "SELECT msg_id FROM proc_state_archive")} == {ignored}
    for m in waiting:
        assert sql(app, f"SELECT count(*) FROM proc_state_hst WHERE msg_id = {m}")[0][0] >= 1

    assert cli_run("acknowledge", str(malformed), str(unsupported), "--operator", "alice", "--reason", "closed")[0] == 0
    assert cli_run("replay", "--ids", str(exhausted), "--apply", "--operator", "alice", "--reason", "fixed")[0] == 0
    drain_now(app)
    with app.engine.begin() as conn:      # what the dispatcher does on a delivery report (no Kafka here)
        conn.execute(text("UPDATE msg_event SET sent_at = now() WHERE released_at IS NOT NULL"))
    code, out, err = cli_run("archive", "--older-than", "0s")
    assert code == 0, err
    assert "kept" not in out
    assert sql(app, "SELECT count(*) FROM proc_state")[0][0] == 0
    archived = {r[0]: r[1:] for r in sql(app, "SELECT msg_id, status, acknowledged_by FROM proc_state_archive")}
    assert archived[malformed] == ("DEAD", "alice") and archived[unsupported] == ("SKIPPED", "alice")
    assert archived[exhausted] == ("SUCCEEDED", None)
    assert sql(app, f"SELECT count(*) FROM proc_state_hst_archive WHERE msg_id = {malformed}")[0][0] >= 1
