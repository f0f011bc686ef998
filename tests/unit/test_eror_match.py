"""EROR matching, purely (C-24, US-08, D9, D28): hand-built EROR bodies of several shapes against
the requests in flight. No sample exists; the rule is documented in docs/requests.md."""

from __future__ import annotations

from builders import envelope

from msgx_engine.handlers.decision import APPLY, SKIP
from msgx_engine.handlers.eror import ErorContext, InFlight, RequestFailure, decide, error_text, match
from msgx_engine.sis.decode import decode

RQFD = InFlight(7, "RQFD", "NONE", "000041")
RQRD = InFlight(8, "RQRD", "GLST", "000042")


def eror(body: str, styp: str = "NONE") -> object:
    return decode(envelope("EROR", styp, body))


def test_echoed_seqn_names_the_request_d28():
    """D28: an echoed SEQN (outside META) wins over everything else, zero padding ignored."""
    msg = eror("\t<EROR><SEQN>42</SEQN><TYPE>RQFD</TYPE><DESC>bad type</DESC></EROR>\n")
    assert match(msg, [RQFD, RQRD]) == (RQRD, "echoed SEQN 000042")


def test_echoed_seqn_of_no_request_in_flight_matches_nothing_d28():
    """C-24: an echo naming a closed request is not moved onto another request in flight."""
    msg = eror("\t<EROR><SEQN>000099</SEQN></EROR>\n")
    request, why = match(msg, [RQFD])
    assert request is None and "[99]" in why


def test_named_type_picks_that_type_c24():
    """D28: any element whose text is RQFD/RQRD names the type; C-24 allows one in flight per type."""
    assert match(eror("\t<EROR><RTYP>RQFD</RTYP><ERRM>window invalid</ERRM></EROR>\n"), [RQFD, RQRD])[0] == RQFD
    assert match(eror("\t<ERRM>unknown table</ERRM>\n", styp="RQRD"), [RQFD, RQRD])[0] == RQRD


def test_named_type_with_nothing_of_it_in_flight_matches_nothing_d28():
    """The EROR names RQRD but only an RQFD is in flight: not failed by mistake."""
    request, why = match(eror("\t<EROR><MTYP>RQRD</MTYP></EROR>\n"), [RQFD])
    assert request is None and "0 RQRD" in why


def test_both_types_named_is_ambiguous_d28():
    request, why = match(eror("\t<EROR><A>RQFD</A><B>RQRD</B></EROR>\n"), [RQFD, RQRD])
    assert request is None and "both" in why


def test_no_type_named_falls_back_to_the_single_request_in_flight_d28():
    """Only with exactly one request in flight; with two (or none) nothing matches."""
    msg = eror("\t<EROR>system busy</EROR>\n")
    assert match(msg, [RQRD])[0] == RQRD
    assert match(msg, [RQFD, RQRD])[0] is None
    assert match(msg, [])[0] is None


def test_decision_fails_the_request_and_alerts_us08():
    """US-08, C-24: FAILED plan with the error text; an alert either way; no match is SKIPPED(no_request)."""
    msg = eror("\t<EROR><CODE>E17</CODE><DESC>no such day</DESC></EROR>\n")
    hit = decide(msg, ErorContext((RQFD,)))
    assert hit.outcome == APPLY and hit.plans == (RequestFailure(7, "EROR/CODE=E17; EROR/DESC=no such day"),)
    assert hit.alert and "request 7" in hit.alert
    miss = decide(msg, ErorContext(()))
    assert (miss.outcome, miss.reason, miss.plans) == (SKIP, "no_request", ())
    assert miss.alert and "no request" in miss.alert


def test_error_text_of_an_empty_eror_says_so():
    assert error_text(eror("")) == "EROR without error text"
