"""What one GTDT costs the protocol in statements (docs/pipeline.md "Performance"): the head, one
load (main row and details together), the pipelined writes, one guarded status
statement. D26's identity window binds inside the status statement and D30's MAFL refresh reads
nothing for a flight that is no code-share child, so neither adds a statement to the hot path."""

from __future__ import annotations

from sqlalchemy import event

from msgx_engine.pipeline.intake import Intake
from msgx_engine.pipeline.writer import try_lock
from tests.builders import gtdt
from tests.pipeline_support import drain_now, gates, proc


def test_d26_d30_a_gtdt_on_a_known_flight_costs_the_documented_statements(app, clock):
    """docs/pipeline.md: head 1, load 1 (main row and details in one statement), writes 4
    (upsert, detail delete, detail insert, outbox insert; pipelined into one round trip), status 1
    (with the identity binding): 7 statements. A GTDT that creates its flight has no details to
    delete, and costs one look for code-share children that may already wait for it (D30): 7."""
    counted: list[str] = []
    app.mailbox.put(gtdt("P1", (1, "A1")))
    drain_now(app)
    app.mailbox.put(gtdt("P1", (1, "B1")))
    app.mailbox.put(gtdt("P2", (1, "C1")))
    with app.engine.connect() as conn:
        assert try_lock(conn)
        Intake(app.mailbox, clock).scan(conn)
        conn.commit()
        processor = app.processor()
        processor.source.body(conn, 2)                 # the bodies are read ahead, as the pump does
        event.listen(conn, "before_cursor_execute", lambda *a: counted.append(a[2][:60]))
        known = processor.step(conn)
        on_known = len(counted)
        created = processor.step(conn)
    assert (known.status, created.status) == ("SUCCEEDED", "SUCCEEDED")
    assert gates(app, "P1") == [(1, "B1")] and proc(app, 3).status == "SUCCEEDED"
    assert on_known == 7, [c for c in counted]
    assert len(counted) - on_known == 7, counted[on_known:]


def test_an_intake_pass_of_new_rows_costs_the_documented_statements(app, clock):
    """docs/pipeline.md "intake": the pump scans every pass, so its statements on PostgreSQL are
    counted (latency). Rows above the high-water mark: the position with the open gaps
    (one statement), which of them are registered or archived (one, US-11 AC3), their insert and
    the high-water mark: 4. None of them can fill a recorded gap (every gap lies below the
    high-water mark), so the gap lookup is not sent; a row below it still looks (late arrival)."""
    app.mailbox.put(gtdt("I1", (1, "A1")))
    drain_now(app)                                          # adopted, registered, processed, marked
    intake = Intake(app.mailbox, clock)
    counted: list[str] = []
    with app.engine.connect() as conn:
        intake.scan(conn)                                   # the pump's first pass: its full scan
        event.listen(conn, "before_cursor_execute", lambda *a: counted.append(" ".join(a[2].split())[:50]))
        for n in range(3):
            app.mailbox.put(gtdt(f"I{n + 2}", (1, "B1")))
        stats = intake.scan(conn)
    assert stats.registered == 3
    assert len(counted) == 4, counted
    assert not any("intake_gap.passed_at" in s for s in counted), counted
