"""The ``msgx`` entry point: the top-level parser, assembled from each command group's
``register(sub)`` in the order ``msgx --help`` lists them, and ``main`` with its logging set-up."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from msgx_engine.cli import (
    archive,
    compare,
    cutover,
    db,
    dead_letters,
    demo,
    mailbox,
    reading,
    recover,
    replay,
    requests,
    run,
)
from msgx_engine.config import MODE_PRODUCTION, ConfigError
from msgx_engine.logcontext import LOG_FORMAT, install_mode
from msgx_engine.logsink import StderrHandler
from msgx_engine.redact import RedactingFilter

DESCRIPTION = "The msgx command: run, inspect and operate msgx from a shell."
GROUPS = (demo, db, mailbox, run, requests, replay, dead_letters, archive, recover, cutover, reading, compare)

log = logging.getLogger("msgx")


def install_redaction() -> None:
    """Every handler of the root logger drops URL passwords and clips long lines (OPS-2)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def _env_mode() -> str:
    """The mode for the log context before Settings are read (an unknown value is refused by
    Settings; until then it shows as given)."""
    return (os.environ.get("MSGX_MODE") or MODE_PRODUCTION).strip().lower() or MODE_PRODUCTION


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="msgx", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("MSGX_LOG_LEVEL", "WARNING"), format=LOG_FORMAT,
                        handlers=[StderrHandler()])      # a full stderr pipe drops lines, never blocks (OPS-2)
    install_redaction()
    install_mode(_env_mode())
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"msgx: configuration refused: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
