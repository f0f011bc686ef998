"""``msgx db``: the state database's schema, upgraded or downgraded."""

from __future__ import annotations

import argparse

from msgx_engine.cli.common import load_settings


def cmd_db(args: argparse.Namespace) -> int:
    from msgx_engine.db import make_engine
    from msgx_engine.store import migrate

    engine = make_engine(load_settings().db_url or "")
    if args.action == "upgrade":
        migrate.upgrade(engine, args.revision or "head")
    elif args.action == "downgrade":
        migrate.downgrade(engine, args.revision or "base")
    print(f"state database at revision {migrate.current_revision(engine)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx db upgrade|downgrade``."""
    db = sub.add_parser("db", help="bring msgx's state database schema up to date (upgrade) or back (downgrade)")
    db.add_argument("action", choices=["upgrade", "downgrade"], help="upgrade or downgrade")
    db.add_argument("revision", nargs="?", help="the schema revision to reach (default: the newest for "
                                                "upgrade, none at all for downgrade)")
    db.set_defaults(func=cmd_db)
