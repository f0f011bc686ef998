"""``msgx mailbox``: a test or demo mailbox's tables, and message files put in it."""

from __future__ import annotations

import argparse
from pathlib import Path

from msgx_engine.cli.common import load_settings


def cmd_mailbox(args: argparse.Namespace) -> int:
    from msgx_engine.mailbox.adapter import Mailbox

    settings = load_settings()
    mailbox = Mailbox(settings.mailbox_url or "", read_only=settings.shadow)
    if args.action == "init":
        mailbox.init()
        print("mailbox tables cminmsgs and coutmsgs ready")
        return 0
    ids = []
    for name in args.files:
        data = Path(name).read_bytes()
        ids.append(mailbox.put(data.decode("utf-8")))
    print(f"inserted {len(ids)} message(s): ids {ids[0]}..{ids[-1]}" if ids else "nothing inserted")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx mailbox init|put``."""
    mb = sub.add_parser("mailbox", help="a test or demo mailbox: create its tables, put message files in it")
    mb_sub = mb.add_subparsers(dest="action", required=True)
    mb_sub.add_parser("init", help="create cminmsgs/coutmsgs (test or demo databases only)")
    put = mb_sub.add_parser("put", help="insert message files as the AODB adapter does")
    put.add_argument("files", nargs="+", help="message files, one message each")
    mb.set_defaults(func=cmd_mailbox)
