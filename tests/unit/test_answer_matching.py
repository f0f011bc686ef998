"""Which request an answer (SCHD RESP, reference RESP) answers, and whether it came in time: the
pure rule of ``handlers.answers.select_request`` (US-08 AC4/AC5, C-23, C-24; decisions L1, L2)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from builders import envelope

from msgx_engine.handlers.answers import LATE_ANSWER, NO_REQUEST, OpenRequest, select_request
from msgx_engine.sis.decode import decode

T0 = datetime(2026, 9, 8, 14, 0, tzinfo=UTC)
D9, D10 = date(2026, 9, 9), date(2026, 9, 10)


def answer(echo: str | None = None):
    extra = f"\t<SEQN>{echo}</SEQN>\n" if echo is not None else ""
    return decode(envelope("GLST", "RESP", extra + "\t<RECS>0</RECS>\n", dttm="20260908220100"))


def req(req_id: int, sent_s: float, status: str = "SENT", *, seqn: str = "000001", fday: date | None = None,
        answered_by: int | None = None) -> OpenRequest:
    return OpenRequest(req_id, fday, T0 + timedelta(seconds=sent_s), seqn=seqn, status=status,
                       answer_msg_id=answered_by)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_request_in_flight_when_the_answer_was_registered_is_the_one():
    """C-24: one request per kind in flight; the answer goes to the newest one sent no later than
    its registration, not to a newer one sent after it arrived."""
    older, newer = req(1, 0, "TIMEOUT", seqn="000001"), req(2, 70, "SENT", seqn="000002")
    assert select_request(answer(), "RQRD", (newer, older), at(20)) == (older, None)
    assert select_request(answer(), "RQRD", (newer, older), at(75)) == (newer, None)


def test_lateness_is_judged_by_the_registration_not_the_status():
    """C-23, Q5 (decision L2): registered 20 s after sending, the answer is taken although the
    tracker has since timed the request out; registered after the limit (RQFD 60 s, RQRD 30 s) it
    is late even while the request is still SENT (the tracker stopped)."""
    timed_out = req(1, 0, "TIMEOUT")
    assert select_request(answer(), "RQFD", (timed_out,), at(20)) == (timed_out, None)
    still_sent = req(1, 0, "SENT")
    request, refusal = select_request(answer(), "RQFD", (still_sent,), at(3600))
    assert request is None and refusal is not None and refusal.reason == LATE_ANSWER
    assert "3600 s" in refusal.detail and "60 s limit" in refusal.detail
    assert select_request(answer(), "RQRD", (still_sent,), at(29.9))[0] == still_sent
    assert select_request(answer(), "RQRD", (still_sent,), at(30))[1].reason == LATE_ANSWER


def test_an_answer_to_a_closed_request_is_late():
    """US-08 AC5: a request already answered (or failed, or expired) takes no second answer."""
    done = req(1, 0, "DONE", answered_by=41)
    request, refusal = select_request(answer(), "RQRD", (done,), at(5))
    assert request is None and refusal.reason == LATE_ANSWER and "DONE by message 41" in refusal.detail


def test_an_echoed_seqn_names_the_request():
    """US-08 AC4: an echo (a SEQN outside META) wins over time order; one naming no request of ours
    matches nothing, and is not moved onto the request in flight."""
    older, newer = req(1, 0, "SENT", seqn="000041"), req(2, 10, "REGISTERED", seqn="000042")
    assert select_request(answer("41"), "RQRD", (newer, older), at(20)) == (older, None)
    request, refusal = select_request(answer("000777"), "RQRD", (older,), at(20))
    assert request is None and refusal.reason == NO_REQUEST and "[777]" in refusal.detail


def test_an_rqfd_answer_goes_to_the_request_of_its_day():
    """D23: with flights, the package's day must be the request's day; nothing fitting: (None, None)
    so the snapshot line says which days were asked for."""
    d9, d10 = req(1, 0, "SENT", fday=D9), req(2, 0, "DONE", fday=D10)
    assert select_request(answer(), "RQFD", (d10, d9), at(5), fits=lambda r: r.fday == D9) == (d9, None)
    assert select_request(answer(), "RQFD", (d9,), at(5), fits=lambda r: r.fday == D10) == (None, None)
    assert select_request(answer(), "RQFD", (d9,), T0 - timedelta(seconds=5)) == (None, None)


def test_an_empty_answer_is_not_taken_while_another_days_request_may_still_be_answered():
    """C-23, D23 (decision L15): an answer naming no day (an empty RESP, no echo) goes to the
    request in flight only when every request the AODB may still answer asked for the same day:
    the ones that timed out since the last one of the kind that was answered or failed."""
    d9_out, d10 = req(1, 0, "TIMEOUT", fday=D9), req(2, 120, "SENT", fday=D10)
    request, refusal = select_request(answer(), "RQFD", (d10, d9_out), at(125), dayless=True)
    assert request is None and refusal.reason == NO_REQUEST and refusal.alert
    assert "request 1 for 2026-09-09" in refusal.detail and "request 2 for 2026-09-10" in refusal.detail
    assert select_request(answer(), "RQFD", (d10, d9_out), at(125)) == (d10, None)        # a day: no doubt

    d10_out = req(3, 0, "TIMEOUT", fday=D10)
    assert select_request(answer(), "RQFD", (d10, d10_out), at(125), dayless=True) == (d10, None)
    answered = req(4, 50, "DONE", fday=D10)
    assert select_request(answer(), "RQFD", (d10, answered, d9_out), at(125), dayless=True) == (d10, None)
    assert select_request(answer(), "RQFD", (d10, d10_out, d9_out), at(125), dayless=True)[0] is None
    d9_unclosed = req(5, 0, "SENT", fday=D9)       # read from the mailbox, never timed out here (L16)
    assert select_request(answer(), "RQFD", (d10, d9_unclosed), at(125), dayless=True)[0] is None
