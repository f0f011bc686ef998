"""The read-only views: ``msgx flights``, ``msgx history``, ``msgx snapshot-report`` and ``msgx status``."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date

from msgx_engine.cli.common import open_app


def cmd_flights(args: argparse.Namespace) -> int:
    from msgx_engine.state.serialize import state_document
    from msgx_engine.store.flights import FlightRepository

    app = open_app()
    with app.engine.connect() as conn, conn.begin():
        states = FlightRepository(conn).load_all_current()
    print(json.dumps([state_document(s) for s in states], ensure_ascii=False, indent=1, sort_keys=True))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """A flight's versions, oldest first: the message behind each, the fields it changed, and
    whether its events reached Kafka and Redis (``store/history.py``). Exit 2: no such flight."""
    from msgx_engine.store.history import flight_history, history_lines

    app = open_app()
    try:
        with app.engine.connect() as conn:
            changes = flight_history(conn, args.flid)
    finally:
        app.dispose()
    kafka, redis = bool(app.settings.kafka_bootstrap), bool(app.settings.redis_url)
    if not changes:
        print(f"msgx history: msgx has written no version of flight {args.flid} (not a FLID it has seen, or "
              "archived and purged)", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"flid": args.flid, "changes": [
            c.as_json(kafka_configured=kafka, redis_configured=redis) for c in changes]}, ensure_ascii=False, indent=1))
    else:
        print("\n".join(history_lines(args.flid, changes, kafka_configured=kafka, redis_configured=redis)))
    return 0


def cmd_snapshot_report(args: argparse.Namespace) -> int:
    """The reconciliation reports as a JSON list, oldest first (``[]`` when there is none)."""
    from msgx_engine.store.ledger import read_reports

    app = open_app()
    try:
        with app.engine.connect() as conn:
            reports = read_reports(conn, day=args.day, latest=args.day is None)
    finally:
        app.dispose()
    print(json.dumps(reports, ensure_ascii=False, indent=1, sort_keys=True))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """One screen: every health check with its cause, the backlog, the pump, dead letters, the outbox,
    snapshots. Exit 0 healthy, 1 a check fails (warnings included), 2 the state database is unreadable."""
    from msgx_engine.monitor.status import EXIT_UNREACHABLE, StateUnreachable, gather
    from msgx_engine.monitor.status_render import as_json, render_text, unreachable_json

    app = open_app()
    try:
        report = gather(app.engine, app.mailbox, mode=app.mode,
                        drift_probe=app.projection_drift if app.settings.redis_url else None,
                        kafka_configured=bool(app.settings.kafka_bootstrap))
    except StateUnreachable as exc:
        if args.json:
            print(json.dumps(unreachable_json(str(exc))))
        print(f"msgx status: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    finally:
        app.dispose()
    print(json.dumps(as_json(report), ensure_ascii=False, indent=1) if args.json else render_text(report))
    return report.exit_code


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx flights``, ``msgx history``, ``msgx snapshot-report`` and ``msgx status``."""
    flights = sub.add_parser("flights", help="print current flights as whole-state JSON")
    flights.set_defaults(func=cmd_flights)

    hist = sub.add_parser("history", help="a flight's versions, oldest first: the mailbox message behind each, the "
                                          "fields it changed, and whether its events reached Kafka and Redis")
    hist.add_argument("flid", metavar="FLID", help="the flight's FLID")
    hist.add_argument("--json", action="store_true", help="the same as JSON")
    hist.set_defaults(func=cmd_history)

    report = sub.add_parser("snapshot-report", help="how far msgx's state had drifted from each daily snapshot")
    report.add_argument("--day", type=date.fromisoformat, help="every report of this day (YYYY-MM-DD); "
                        "default: the newest report")
    report.set_defaults(func=cmd_snapshot_report)

    status = sub.add_parser("status", help="is msgx healthy? every check with its cause and the first command to "
                                           "run; exit 0 healthy, 1 a check fails, 2 the database is unreachable",
                            description="One screen without Dagster or Prometheus: every health check (OK, FAILING, "
                                        "or WARN for work waiting for an operator) with its cause, the first command "
                                        "to run and its runbook section (docs/runbook.md), the backlog, the pump, "
                                        "dead letters, the outbox per topic and the newest snapshot of each live day. "
                                        "Exit 0: healthy; 1: a check fails, warnings included; 2: the state database "
                                        "cannot be read or its schema is behind.")
    status.add_argument("--json", action="store_true", help="the same content as JSON, for scripts")
    status.set_defaults(func=cmd_status)
