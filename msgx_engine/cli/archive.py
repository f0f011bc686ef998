"""``msgx archive``: finished messages to the archive tables, old flights and snapshot records purged
(US-11)."""

from __future__ import annotations

import argparse

from msgx_engine.cli.common import open_app


def cmd_archive(args: argparse.Namespace) -> int:
    import getpass

    from msgx_engine.config import parse_duration

    older_than = parse_duration(args.older_than, name="--older-than") if args.older_than else None
    app = open_app()
    try:
        app.check_ready()
        policy = app.archive_policy(older_than, batch=args.batch)
        report = app.archiver().run(policy, dry_run=args.dry_run, operator=args.operator or getpass.getuser(),
                                    reason=f"msgx archive --older-than {args.older_than or 'MSGX_ARCHIVE_AFTER'}")
    finally:
        app.dispose()
    print("\n".join(report.lines()))
    if report.audit_id is not None:
        print(f"audit {report.audit_id}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx archive``."""
    arch = sub.add_parser("archive", help="move finished messages to the archive tables, purge old flights "
                                          "and old snapshot records")
    arch.add_argument("--older-than", help="retention of terminal messages, e.g. 2d (default MSGX_ARCHIVE_AFTER; "
                                           "0s allowed); identity bindings inside MSGX_IDENTITY_WINDOW are kept")
    arch.add_argument("--dry-run", action="store_true", help="print what would be archived or removed")
    arch.add_argument("--batch", type=int, default=1000, help="messages or flights per transaction")
    arch.add_argument("--operator", help="recorded in the audit trail (default: the OS user)")
    arch.set_defaults(func=cmd_archive)
