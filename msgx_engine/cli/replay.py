"""``msgx replay`` and ``msgx skip``: an operator re-queues failed messages or ends an open one
(both audited; US-10, D24, vanished mailbox row)."""

from __future__ import annotations

import argparse
import sys

from msgx_engine.cli.common import open_app
from msgx_engine.config import ConfigError


def _when(name: str, value: str | None, now):
    """``--since``/``--until``: an ISO date-time (naive means UTC) or a duration back from now (``2h``)."""
    from datetime import UTC, datetime

    from msgx_engine.config import parse_duration

    if value is None:
        return None
    if value.strip()[-1:].lower() in ("s", "m", "h", "d") and value.strip()[:-1].isdigit():
        return now - parse_duration(value, name=name)
    try:
        when = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ConfigError(f"{name} {value!r} is neither an ISO date-time nor a duration like 2h") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _ids(values: list[str] | None) -> tuple[int, ...]:
    out: list[int] = []
    for v in values or []:
        for part in v.replace(",", " ").split():
            if not part.isdigit():
                raise ConfigError(f"--ids {part!r} is not a mailbox id")
            out.append(int(part))
    return tuple(dict.fromkeys(out))


def replay_selection(args: argparse.Namespace, now):
    """The selection of ``msgx replay``: by failure reason with --select-reason; --reason is only
    the operator's audit text of an --apply, never a filter."""
    from msgx_engine.store.queue_selection import Selection

    return Selection(ids=_ids(args.ids), statuses=tuple(args.status or ()), reasons=tuple(args.select_reason or ()),
                     since=_when("--since", args.since, now), until=_when("--until", args.until, now))


def cmd_replay(args: argparse.Namespace) -> int:
    from msgx_engine.operations.replay import Replayer

    app = open_app()
    try:
        now = app.clock.now()
        if not args.apply and args.reason is not None:
            print("msgx replay: --reason is the audit text of --apply; a preview selects by failure reason with "
                  "--select-reason (for example --select-reason unsupported)", file=sys.stderr)
            return 2
        sel = replay_selection(args, now)
        if sel.empty:
            print("msgx replay: a selection is required (--ids, --status, --select-reason, --since/--until); "
                  "there is no replay of everything", file=sys.stderr)
            return 2
        replayer = Replayer(app.engine, app.mailbox, max_body_bytes=app.settings.max_body_bytes)
        if not args.apply:
            report = replayer.preview(sel)
            print("\n".join(report.lines()))
            ok = [str(i.row.msg_id) for i in report.items if not i.refusal]
            if ok:
                shown = ",".join(ok[:50]) + (",..." if len(ok) > 50 else "")
                print(f"to replay: msgx replay --ids {shown} --apply --operator NAME --reason TEXT"
                      + (" --force-stale REASON" if report.stale else ""))
            return 0
        if not (args.operator or "").strip() or not (args.reason or "").strip():
            print("msgx replay: --apply needs --operator NAME and --reason TEXT (select by failure reason with "
                  "--select-reason)", file=sys.stderr)
            return 2
        result = replayer.apply(sel, operator=args.operator, reason=args.reason, now=now,
                                force_stale=args.force_stale)
        print("\n".join(result.report.lines()))
        if not result.applied:
            for why in result.refused_because:
                print(f"msgx replay: refused, nothing re-queued: {why}", file=sys.stderr)
            print(f"audit {result.audit_id}: refused")
            return 2
        print(f"re-queued {len(result.requeued)} message(s); audit {result.audit_id}")
        return 0
    finally:
        app.dispose()


def cmd_skip(args: argparse.Namespace) -> int:
    from msgx_engine.operations.skip import skip

    app = open_app()
    try:
        result = skip(app.engine, args.msg_id, operator=args.operator, reason=args.reason, now=app.clock.now())
    finally:
        app.dispose()
    if not result.skipped:
        print(f"msgx skip: mailbox id {args.msg_id} {result.refusal}; audit {result.audit_id}", file=sys.stderr)
        return 2
    print(f"mailbox id {args.msg_id}: {result.before} -> SKIPPED(operator_skip); audit {result.audit_id}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx replay`` and ``msgx skip``."""
    replay = sub.add_parser("replay", help="preview (default) or apply a replay of failed messages (audited)")
    replay.add_argument("--ids", nargs="+", help="mailbox ids (space or comma separated)")
    replay.add_argument("--status", nargs="+", help="DEAD, FAILED or SKIPPED")
    replay.add_argument("--select-reason", action="append", metavar="REASON",
                        help="select by failure reason or error class (exhausted, unsupported, INFRA, ...); "
                             "may be repeated")
    replay.add_argument("--reason", metavar="TEXT", help="with --apply: why you replay (recorded in the audit trail); "
                                                         "never a selection")
    replay.add_argument("--since", help="registered at or after: ISO date-time or a duration back (2h)")
    replay.add_argument("--until", help="registered before: ISO date-time or a duration back")
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--preview", action="store_true", help="show what a replay would do (the default)")
    mode.add_argument("--apply", action="store_true", help="re-queue the selection (all or nothing)")
    replay.add_argument("--operator", help="who applies (recorded in the audit trail)")
    replay.add_argument("--force-stale", metavar="REASON",
                        help="replay even where later messages have changed a flight since (why)")
    replay.set_defaults(func=cmd_replay)

    skip = sub.add_parser("skip", help="end an open message that cannot proceed: it ends SKIPPED with reason "
                                       "operator_skip (recorded in the audit trail)")
    skip.add_argument("msg_id", type=int, metavar="ID", help="the message's mailbox id")
    skip.add_argument("--operator", required=True, help="who ends it (recorded in the audit trail)")
    skip.add_argument("--reason", required=True, help="why it cannot proceed")
    skip.set_defaults(func=cmd_skip)
