"""``msgx request``: requests to the AODB (RQFD day plan, RQRD reference data) and a tracking round
(US-08, D16, request lifecycle)."""

from __future__ import annotations

import argparse
import json
import sys

from msgx_engine.cli.common import open_app


def _request_time(name: str, value: str | None):
    """An optional ``--start``/``--end`` in the POST /schd/sync format (24-hour local time)."""
    from msgx_engine.http.schd_sync import parse_time

    return None if value is None else parse_time(name, value)


def request_rqfd(tracker, start: str | None, end: str | None) -> dict[str, object]:
    """Register an RQFD; either bound may be omitted, not both (catalogue §6); one day only (D23, a RESP's day)."""
    first, last = _request_time("--start", start), _request_time("--end", end)
    return tracker.register_rqfd(first, last).as_json()


def request_rqrd(tracker, rtype: str) -> dict[str, object]:
    """Register an RQRD for one of the 23 reference types."""
    return tracker.register_rqrd(rtype).as_json()


def request_track(tracker) -> dict[str, object]:
    """One tracking round (send pending, expire timeouts) and what is still open."""
    return {**tracker.track().as_json(), "open": tracker.open_requests()}


def cmd_request(args: argparse.Namespace) -> int:
    from msgx_engine.http.errors import ApiError
    from msgx_engine.requests.tracker import RequestTracker
    from msgx_engine.sis.requests import RequestInvalid
    from msgx_engine.store.cutover_state import RequestsStopped

    app = open_app()
    try:
        tracker = RequestTracker(app.engine, app.mailbox, app.clock)
        if args.action == "rqfd":
            doc = request_rqfd(tracker, args.start, args.end)
        elif args.action == "rqrd":
            doc = request_rqrd(tracker, args.rtype)
        else:
            doc = request_track(tracker)
    except (RequestInvalid, ApiError, RequestsStopped) as exc:
        print(f"msgx request: {exc}", file=sys.stderr)
        return 2
    finally:
        app.dispose()
    print(json.dumps(doc, ensure_ascii=False, default=str))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx request rqfd|rqrd|track``."""
    req = sub.add_parser("request", help="requests to the AODB (RQFD day plan, RQRD reference data)")
    req_sub = req.add_subparsers(dest="action", required=True)
    rqfd = req_sub.add_parser("rqfd", help="register a day-plan request (sent by `msgx request track`)")
    rqfd.add_argument("--start", help="window start, YYYY-MM-DD HH:MM[:SS] local (its date is the day)")
    rqfd.add_argument("--end", help="window end, same format (either bound may be omitted, not both)")
    rqrd = req_sub.add_parser("rqrd", help="register a reference-data request")
    rqrd.add_argument("rtype", help="one of the 23 reference types, e.g. GLST")
    req_sub.add_parser("track", help="send pending requests to COUTMSGS and time out overdue ones, once")
    req.set_defaults(func=cmd_request)
