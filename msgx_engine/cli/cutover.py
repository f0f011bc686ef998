"""An installation's start and go-live: ``msgx adopt`` (first installation on a processed mailbox),
``msgx shadow start-from`` (a fresh shadow's starting point) and ``msgx cutover`` (the hand-over
between two installations and back), all audited."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from msgx_engine.cli.common import is_signed, open_app, signed_action


def cmd_adopt(args: argparse.Namespace) -> int:
    """An empty state database on a mailbox processed recently is refused (exit 4) as a lost state;
    this records, audited, that it is a first installation taking the processed rows as history."""
    from msgx_engine.operations.recover import AlreadyAdopted, RecoverBusy, adopt
    from msgx_engine.pipeline.pump import PumpBusy

    code, result = signed_action(
        "adopt", args, lambda app: adopt(app.engine, app.mailbox, operator=args.operator, reason=args.reason),
        busy=(RecoverBusy, PumpBusy), refused=(AlreadyAdopted,))
    if result is None:
        return code
    print(f"adopted the mailbox: rows up to id {result.high_water} are taken as processed before this "
          f"installation; audit {result.audit_id}")
    return 0


def cmd_shadow_start_from(args: argparse.Namespace) -> int:
    """A fresh shadow replays the mailbox from an operator-chosen id, whatever production marked
    (``operations/shadow_start.py``), so a comparison with production is meaningful from the start."""
    from msgx_engine.operations.shadow_start import ShadowStartBusy, ShadowStartRefused, start_from

    code, result = signed_action(
        "shadow start-from", args,
        lambda app: start_from(app.engine, app.mailbox, args.id, operator=args.operator, reason=args.reason),
        busy=(ShadowStartBusy,), refused=(ShadowStartRefused,))
    if result is None:
        return code
    print(f"this shadow starts at mailbox id {result.start_id}: every row from there on is read and processed, "
          f"{result.marked_from_start} of them already processed by production; audit {result.audit_id}")
    return 0


# --- cut-over and rollback (go-live) ------------------------------------------------------------
def cmd_cutover(args: argparse.Namespace) -> int:
    """Hand the right to process and mark the mailbox between two installations (``msgx_engine.cutover``):
    what was checked and done on stdout; refused (nothing changed) exit 2, to be run again exit 1."""
    from msgx_engine.cutover.common import Refused, Report, Unfinished
    from msgx_engine.cutover.promote import promote
    from msgx_engine.cutover.resume import resume
    from msgx_engine.cutover.rollback import rollback
    from msgx_engine.cutover.stop import stop_writes

    name = f"msgx cutover {args.cutover_command}"
    if not is_signed(args):
        print(f"{name}: needs --operator NAME and --reason TEXT", file=sys.stderr)
        return 2
    app = open_app()
    report = Report()
    try:
        app.check_ready()
        signed = {"operator": args.operator, "reason": args.reason, "report": report}
        if args.cutover_command == "stop-writes":
            stop_writes(app, wait_s=args.wait, accept_dead=args.accept_dead, **signed)
        elif args.cutover_command == "promote":
            promote(app, args.from_url, known=args.known, **signed)
        elif args.cutover_command == "resume":
            resume(app, **signed)
        else:
            rollback(app, args.from_url, known=args.known, **signed)
    except (Refused, Unfinished) as exc:
        print("\n".join(report.lines))
        refused = isinstance(exc, Refused)
        print(f"{name}: {'refused, nothing changed' if refused else 'not finished'}: {exc}", file=sys.stderr)
        return 2 if refused else 1
    finally:
        app.dispose()
    print("\n".join(report.lines))
    print(f"audit {report.audit_id}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx adopt``, ``msgx shadow start-from`` and ``msgx cutover``."""
    adopt = sub.add_parser("adopt", help="first installation on a mailbox that was processed recently: take its "
                                         "processed rows as history from before this installation (audited)")
    adopt.add_argument("--operator", required=True, help="who does it (recorded in the audit trail)")
    adopt.add_argument("--reason", required=True, help="why")
    adopt.set_defaults(func=cmd_adopt)
    shadow = sub.add_parser("shadow", help="a shadow installation's starting point")
    shadow_sub = shadow.add_subparsers(dest="shadow_command", required=True)
    start = shadow_sub.add_parser(
        "start-from", help="a fresh shadow processes the mailbox from this id on, rows production already "
                           "processed included (audited)",
        description="Run once on a fresh shadow's empty state database, before its pump: the shadow reads and "
                    "processes every mailbox row from ID on, whether production has processed it or not, so its "
                    "flights match production's from the start. Give the first id of the oldest day to compare.")
    start.add_argument("id", type=int, metavar="ID", help="the first mailbox id to process")
    start.add_argument("--operator", required=True, help="who does it (recorded in the audit trail)")
    start.add_argument("--reason", required=True, help="why")
    start.set_defaults(func=cmd_shadow_start_from)
    cutover = sub.add_parser(
        "cutover", help="hand the right to process and mark the mailbox from one installation to another, and "
                        "back (recorded in the audit trail); see docs/runbook.md",
        description="Go-live and its rollback, in three steps: stop-writes on the active installation, promote on "
                    "the shadow taking over, rollback on the previous installation after stop-writes on the "
                    "promoted one; resume calls a cut-over off before any promote. Each prints what it checked "
                    "and did; a refusal changes nothing (exit 2).")
    cut_sub = cutover.add_subparsers(dest="cutover_command", required=True)
    stop = cut_sub.add_parser(
        "stop-writes", help="the active installation stops at a watermark, delivers and marks what it owes, and "
                            "gives up the right; its pumps refuse to run afterwards")
    stop.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                      help="how long to wait for a running pump or dispatcher to stop (default 120)")
    stop.add_argument("--accept-dead", type=int, metavar="N",
                      help="hand over although N events (dead ones and those held behind them, the number "
                           "a refused stop-writes printed) will never be published")
    promote = cut_sub.add_parser(
        "promote", help="run on the shadow with its production configuration: it takes the right over at the "
                        "stopped installation's watermark and goes on from there")
    rollback = cut_sub.add_parser(
        "rollback", help="run on the installation that stopped writes, after stop-writes on the promoted one: it "
                         "applies what that one processed since and takes the right back")
    for each, other in ((promote, "the stopped installation's"), (rollback, "the promoted installation's")):
        each.add_argument("--from", dest="from_url", required=True, metavar="URL",
                          help=f"{other} state database (postgresql+psycopg://…), only read")
        each.add_argument("--known", type=Path, metavar="FILE", help="known-differences file for the comparison "
                          "of the two installations' flights, e.g. deploy/compare/known-differences.yml")
    resume = cut_sub.add_parser(
        "resume", help="the cut-over is called off before any promote: the installation that stopped writes "
                       "takes them back and goes on from its watermark")
    for each in (stop, promote, rollback, resume):
        each.add_argument("--operator", required=True, help="who does it (recorded in the audit trail)")
        each.add_argument("--reason", required=True, help="why")
    cutover.set_defaults(func=cmd_cutover)
