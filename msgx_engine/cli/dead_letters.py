"""``msgx acknowledge`` and ``msgx outbox``: dead letters and dead events with a lifecycle, closed or
sent again by an operator (audited)."""

from __future__ import annotations

import argparse
import json
import sys

from msgx_engine.cli.common import is_signed, open_app
from msgx_engine.config import ConfigError


def _mailbox_ids(values: list[str], what: str) -> list[int]:
    out: list[int] = []
    for v in values:
        for part in v.replace(",", " ").split():
            if not part.isdigit():
                raise ConfigError(f"{part!r} is not {what}")
            out.append(int(part))
    return list(dict.fromkeys(out))


def cmd_acknowledge(args: argparse.Namespace) -> int:
    from msgx_engine.operations.acknowledge import acknowledge

    ids = _mailbox_ids(args.ids, "a mailbox id")
    if not ids or not args.operator.strip() or not args.reason.strip():
        print("msgx acknowledge: give mailbox ids, --operator NAME and --reason TEXT", file=sys.stderr)
        return 2
    app = open_app()
    try:
        result = acknowledge(app.engine, ids, operator=args.operator, reason=args.reason, now=app.clock.now(),
                             even_if_replayable=args.even_if_replayable)
    finally:
        app.dispose()
    if not result.applied:
        for line in result.lines():
            print(f"msgx acknowledge: {line}", file=sys.stderr)
        print(f"msgx acknowledge: refused, nothing acknowledged ({'; '.join(result.refused_because)}); "
              f"audit {result.audit_id}", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    print(f"acknowledged {len(result.acknowledged)} message(s): they no longer count as waiting dead letters "
          f"and are archived normally; audit {result.audit_id}")
    return 0


def cmd_outbox(args: argparse.Namespace) -> int:
    from msgx_engine.operations import outbox_ops

    ids = _mailbox_ids(args.ids or [], "an event id")
    if not args.apply:
        if ids or args.all_dead or args.operator or args.reason:
            print("msgx outbox: --ids, --all-dead, --operator and --reason go with --apply", file=sys.stderr)
            return 2
        app = open_app()
        try:
            view = outbox_ops.preview(app.engine, app.clock.now())
        finally:
            app.dispose()
        print(json.dumps(view.as_json(), ensure_ascii=False, indent=1) if args.json else "\n".join(view.lines()))
        return 0
    if not is_signed(args) or bool(ids) == args.all_dead:
        print("msgx outbox: --apply needs --operator NAME, --reason TEXT and either --ids EVENT_ID... "
              "or --all-dead", file=sys.stderr)
        return 2
    app = open_app()
    try:
        result = outbox_ops.revive(app.engine, event_ids=ids, all_dead=args.all_dead, operator=args.operator,
                                   reason=args.reason)
    finally:
        app.dispose()
    if not result.applied:
        for line in result.lines():
            print(f"msgx outbox: {line}", file=sys.stderr)
        print(f"audit {result.audit_id}: refused", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    print(f"audit {result.audit_id}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx acknowledge`` and ``msgx outbox``."""
    ack = sub.add_parser("acknowledge", help="close dead or unsupported messages that will not be replayed: they "
                                             "leave the dead-letter count and are archived normally (recorded "
                                             "in the audit trail)")
    ack.add_argument("ids", nargs="+", metavar="ID", help="mailbox ids (space or comma separated)")
    ack.add_argument("--operator", required=True, help="who closes them (recorded in the audit trail)")
    ack.add_argument("--reason", required=True, help="why they need no replay")
    ack.add_argument("--even-if-replayable", action="store_true",
                     help="close dead letters a replay could fix (DEAD exhausted or missing) too; without it "
                          "they are refused")
    ack.set_defaults(func=cmd_acknowledge)

    ob = sub.add_parser("outbox", help="events waiting for delivery to Kafka and dead events (default); "
                                       "--apply sends dead events again (recorded in the audit trail)")
    ob.add_argument("--json", action="store_true", help="the overview as JSON")
    ob.add_argument("--apply", action="store_true", help="revive the chosen dead events: they are delivered "
                                                         "again, before the later events of their flight")
    ob.add_argument("--ids", nargs="+", metavar="EVENT_ID", help="dead event ids (space or comma separated)")
    ob.add_argument("--all-dead", action="store_true", help="every dead event")
    ob.add_argument("--operator", help="who revives them (recorded in the audit trail)")
    ob.add_argument("--reason", help="why they may be sent now")
    ob.set_defaults(func=cmd_outbox)
