"""Request lifecycle on real PostgreSQL + MariaDB (D16; US-08 AC2/AC3; C-24): register, one open
request per (rtype, styp), send to COUTMSGS, crash recovery without a second insert, timeouts."""

from __future__ import annotations

import threading
from datetime import date, datetime

import pytest
from sqlalchemy import select, text

from msgx_engine.mailbox.tables import coutmsgs
from msgx_engine.requests.tracker import RequestTracker
from msgx_engine.sis.decode import decode
from msgx_engine.sis.requests import RequestInvalid


@pytest.fixture
def tracker(app) -> RequestTracker:
    return RequestTracker(app.engine, app.mailbox, app.clock)


def rows(app, req_ids=None) -> dict[int, tuple]:
    """req_id -> (status, coutmsgs_id, seqn, sent_at is set)."""
    with app.engine.connect() as conn:
        found = conn.execute(text("SELECT req_id, status, coutmsgs_id, seqn, sent_at FROM req_track ORDER BY req_id"))
        return {r.req_id: (r.status, r.coutmsgs_id, r.seqn, r.sent_at is not None) for r in found
                if req_ids is None or r.req_id in req_ids}


def outbox(app) -> list[tuple[int, str, str]]:
    with app.mailbox.engine.connect() as conn:
        q = select(coutmsgs.c.COUTMSGS_ID, coutmsgs.c.ROUTINGID, coutmsgs.c.COUTMSGS_CLOB_MSG).order_by(
            coutmsgs.c.COUTMSGS_ID)
        return [tuple(r) for r in conn.execute(q)]


def test_register_persists_registered_and_sends_nothing(app, tracker):
    """US-08 AC2: the intent is in PostgreSQL (REGISTERED, fday, window texts) before anything is sent."""
    reg = tracker.register_rqfd(datetime(2026, 9, 9, 0, 0), datetime(2026, 9, 9, 23, 59))
    with app.engine.connect() as conn:
        row = conn.execute(text("SELECT rtype, styp, fday, start_text, end_text, status, seqn, created_at "
                                "FROM req_track WHERE req_id = :r"), {"r": reg.req_id}).one()
    assert tuple(row)[:7] == ("RQFD", "NONE", date(2026, 9, 9), "09SEP260000", "09SEP262359", "REGISTERED", None)
    assert row.created_at == app.clock.now()
    assert reg.as_json()["state"] == "REGISTERED" and reg.expired == ()
    assert outbox(app) == []
    with pytest.raises(RequestInvalid):
        tracker.register_rqfd(None, None)
    with pytest.raises(RequestInvalid):
        tracker.register_rqrd("NOPE")


def test_a_new_request_expires_only_an_unsent_one_of_the_same_kind(app, tracker, clock):
    """US-08 AC3, C-24 (decision L1): a newer request EXPIREs an older REGISTERED one of the same
    (rtype, styp) in the same transaction; other kinds are untouched. A SENT one is never expired
    by a newer registration: it keeps its type's slot until it is answered, fails or times out,
    and the newer one waits REGISTERED, unsent, until then; after a timeout, one more timeout
    (decision L14)."""
    first = tracker.register_rqrd("GLST")
    other = tracker.register_rqfd(datetime(2026, 9, 9), None)
    second = tracker.register_rqrd("glst")
    assert second.expired == (first.req_id,)
    assert rows(app)[first.req_id][0] == "EXPIRED" and rows(app)[other.req_id][0] == "REGISTERED"

    tracker.send_pending()
    assert rows(app)[second.req_id][0] == "SENT" and rows(app)[other.req_id][0] == "SENT"
    third = tracker.register_rqrd("GLST")
    assert third.expired == ()
    assert [rows(app)[r][0] for r in (second.req_id, third.req_id)] == ["SENT", "REGISTERED"]
    assert tracker.track().sent == [] and len(outbox(app)) == 2       # one landed, unclosed RQRD at most
    clock.advance(30)
    summary = tracker.track()
    assert (summary.timed_out, tracker.send_pending().sent) == ([second.req_id], [])
    clock.advance(30)
    assert tracker.send_pending().sent == [third.req_id]


def test_concurrent_registrations_leave_exactly_one_open_request(app, tracker):
    """US-08 AC3: eight threads register the same kind at once; one stays open, the rest EXPIRED."""
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def register() -> None:
        try:
            barrier.wait()
            tracker.register_rqfd(datetime(2026, 9, 9), None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=register) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    statuses = [r[0] for r in rows(app).values()]
    assert sorted(statuses) == ["EXPIRED"] * 7 + ["REGISTERED"]


def test_send_writes_coutmsgs_and_marks_sent(app, tracker):
    """US-08 AC2, catalogue §6: ROUTINGID VIEWRQFD/VIEWRQRD, a decodable body with the recorded SEQN;
    SENT with coutmsgs_id and sent_at from the clock only after the insert is confirmed."""
    fd = tracker.register_rqfd(datetime(2026, 9, 9, 0, 0), datetime(2026, 9, 9, 23, 59))
    rd = tracker.register_rqrd("GLST")
    summary = tracker.send_pending()
    assert sorted(summary.sent) == sorted([fd.req_id, rd.req_id]) and summary.recovered == []
    sent = outbox(app)
    assert [r[1] for r in sent] == ["VIEWRQFD", "VIEWRQRD"]
    state = rows(app)
    for req, (cid, _routing, body) in zip((fd, rd), sent, strict=True):
        status, coutmsgs_id, seqn, has_sent_at = state[req.req_id]
        assert (status, coutmsgs_id, has_sent_at) == ("SENT", cid, True)
        msg = decode(body)
        assert msg.meta.seqn == seqn and len(seqn) == 6 and msg.meta.sndr == "VIEW"
    assert decode(sent[0][2]).meta.styp == "NONE"
    assert [(c.tag, c.text) for c in decode(sent[0][2]).root.find("RQFD")] == [
        ("STDB", "09SEP260000"), ("STDE", "09SEP262359")]
    assert decode(sent[1][2]).root.findtext("RQRD/RTYP") == "GLST"
    with app.engine.connect() as conn:
        sent_at = conn.execute(text("SELECT sent_at FROM req_track WHERE req_id = :r"), {"r": fd.req_id}).scalar()
    assert sent_at == app.clock.now()
    assert tracker.send_pending().sent == []          # nothing pending: nothing resent
    assert len(outbox(app)) == 2


def test_one_request_in_flight_per_message_type(app, tracker, clock):
    """C-24: a second RQRD kind waits while another RQRD is SENT and unanswered; it goes once the
    first times out (so nothing waits forever, US-08 AC3). RQFD has its own slot."""
    glst = tracker.register_rqrd("GLST")
    slst = tracker.register_rqrd("SLST")
    fd = tracker.register_rqfd(datetime(2026, 9, 9), None)
    assert sorted(tracker.send_pending().sent) == sorted([glst.req_id, fd.req_id])
    assert rows(app)[slst.req_id][0] == "REGISTERED"
    clock.advance(30)
    summary = tracker.track()
    assert summary.timed_out == [glst.req_id]
    assert tracker.send_pending().sent == [slst.req_id]


class MailboxCrash(RuntimeError):
    pass


def test_crash_between_coutmsgs_insert_and_pg_update_does_not_resend(app, tracker, monkeypatch):
    """US-08 AC2, C-24, INV-16: the SEQN is committed before the insert; a run that dies after the
    COUTMSGS insert leaves the request REGISTERED with that SEQN, and the next run finds the row by
    SEQN and marks it SENT without inserting a second one."""
    reg = tracker.register_rqrd("GLST")
    real_mark = RequestTracker._mark_sent

    def crash(self, claim, coutmsgs_id, sent_at):
        raise MailboxCrash("process died after the COUTMSGS insert")

    monkeypatch.setattr(RequestTracker, "_mark_sent", crash)
    with pytest.raises(MailboxCrash):
        tracker.send_pending()
    status, coutmsgs_id, seqn, _ = rows(app)[reg.req_id]
    assert (status, coutmsgs_id) == ("REGISTERED", None) and seqn is not None
    assert len(outbox(app)) == 1

    monkeypatch.setattr(RequestTracker, "_mark_sent", real_mark)
    summary = tracker.send_pending()
    assert summary.recovered == [reg.req_id] and summary.sent == []
    assert len(outbox(app)) == 1
    assert rows(app)[reg.req_id] == ("SENT", outbox(app)[0][0], seqn, True)


def test_failed_insert_is_retried_with_the_same_seqn(app, tracker, monkeypatch):
    """US-08 AC2: when the mailbox insert itself failed, recovery finds nothing and inserts once,
    keeping the SEQN recorded before the attempt."""
    reg = tracker.register_rqfd(datetime(2026, 9, 9), None)

    def down(body, routing_id):
        raise MailboxCrash("mailbox unreachable")

    monkeypatch.setattr(app.mailbox, "send_request", down)
    with pytest.raises(MailboxCrash):
        tracker.send_pending()
    seqn = rows(app)[reg.req_id][2]
    monkeypatch.undo()
    assert tracker.send_pending().sent == [reg.req_id]
    ((cid, _, body),) = outbox(app)
    assert decode(body).meta.seqn == seqn and rows(app)[reg.req_id][:2] == ("SENT", cid)


def test_a_concurrent_sender_steps_aside(app, tracker):
    """One sender at a time: while the advisory lock is held elsewhere, send_pending reports busy
    and inserts nothing (so the recovery lookup never races another sender's insert)."""
    from msgx_engine.store.locks import REQUEST_SENDER
    from msgx_engine.store.session_lock import SessionLock

    tracker.register_rqrd("GLST")
    other = SessionLock(app.engine, REQUEST_SENDER, "test holder")
    other.acquire()
    try:
        assert tracker.send_pending().busy is True
        assert outbox(app) == []
    finally:
        other.release()
    assert len(tracker.send_pending().sent) == 1


@pytest.mark.parametrize(("register", "timeout"), [
    (lambda t: t.register_rqfd(datetime(2026, 9, 9), None), 60),
    (lambda t: t.register_rqrd("GLST"), 30),
])
def test_sent_requests_time_out_after_60_or_30_seconds_from_sent_at(app, tracker, clock, register, timeout):
    """US-08 AC3, D16: RQFD 60 s, RQRD 30 s, counted from sent_at (not created_at); REGISTERED
    requests do not time out; TIMEOUT is final (a later expire leaves it)."""
    reg = register(tracker)
    clock.advance(500)                                   # registered long ago: the clock starts at sending
    tracker.send_pending()
    clock.advance(timeout - 1)
    assert tracker.expire_timeouts() == []
    clock.advance(1)
    assert tracker.expire_timeouts() == [reg.req_id]
    with app.engine.connect() as conn:
        row = conn.execute(text("SELECT status, done_at, detail FROM req_track WHERE req_id = :r"),
                           {"r": reg.req_id}).one()
    assert (row.status, row.done_at) == ("TIMEOUT", clock.now())
    assert f"{timeout} s" in row.detail
    assert tracker.expire_timeouts() == []


def test_seqn_counter_cycles_after_999999(app, tracker, clock):
    """Catalogue §6: the 6-digit SEQN counter (sequence req_seqn, migration 0005) wraps to 000001
    like the peer's counter instead of failing at 999999."""
    with app.engine.begin() as conn:
        conn.execute(text("SELECT setval('req_seqn', 999998)"))
    first = tracker.register_rqfd(datetime(2026, 9, 9), None)
    tracker.send_pending()
    second = tracker.register_rqfd(datetime(2026, 9, 10), None)     # waits for the SENT one
    clock.advance(60)
    assert tracker.track().timed_out == [first.req_id]
    clock.advance(60)                                               # the rest after a timeout (L14)
    tracker.send_pending()
    assert [rows(app)[r.req_id][2] for r in (first, second)] == ["999999", "000001"]
    assert [decode(body).meta.seqn for _, _, body in outbox(app)] == ["999999", "000001"]


def test_the_day_plan_job_run_again_for_the_same_day_asks_the_aodb_once(app, tracker, clock):
    """T12: what the 22:00 schedule's job registers (``rqfd_for_tomorrow``) is decided per target
    day. The job run at 22:00 airport time asks for tomorrow and the request is sent; run again for
    the same day (the tick again after the daemon host's clock was stepped back an hour across
    22:00), whether the first is still unsent, in flight or timed out, it registers nothing and no
    second RQFD reaches COUTMSGS; the next day's run asks for the next day. ``msgx request rqfd``
    (``register_rqfd``) still asks again when an operator does."""
    from msgx_dagster.jobs.requests import rqfd_for_tomorrow

    clock.advance(14 * 3600)                       # 2026-01-01 22:00 in Asia/Shanghai
    first = rqfd_for_tomorrow(tracker, clock.now())
    assert [r.fday for r in first] == [date(2026, 1, 2)]
    assert rqfd_for_tomorrow(tracker, clock.now()) == []            # a second run before it is sent
    assert tracker.send_pending().sent == [first[0].req_id]
    clock.advance(-3600)                          # stepped back across 22:00 and ticked again
    assert rqfd_for_tomorrow(tracker, clock.now()) == []
    clock.advance(3600 + 61)
    assert tracker.expire_timeouts() == [first[0].req_id]
    assert rqfd_for_tomorrow(tracker, clock.now()) == []            # timed out: still asked once
    assert tracker.send_pending().sent == []
    assert [r[1] for r in outbox(app)] == ["VIEWRQFD"]
    assert {s for s, *_ in rows(app).values()} == {"TIMEOUT"}

    clock.advance(86400)                          # the next evening: the next day
    nxt = rqfd_for_tomorrow(tracker, clock.now())
    assert [r.fday for r in nxt] == [date(2026, 1, 3)]
    again = tracker.register_rqfd(datetime(2026, 1, 3, 0, 0), datetime(2026, 1, 3, 23, 59))   # an operator's ask
    assert again.expired == (nxt[0].req_id,)
