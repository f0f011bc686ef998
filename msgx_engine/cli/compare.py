"""``msgx compare``: this installation's flights against a reference, or the go-live verdict over
the recorded comparisons (``--summary``)."""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

from msgx_engine.cli.common import load_settings


def cmd_compare(args: argparse.Namespace) -> int:
    """This installation's flights against a reference, field by field; exit 0 nothing unexplained,
    1 unexplained differences, 2 a side cannot be read."""
    from msgx_engine.compare.run import run

    if args.summary:
        return _compare_summary(args)
    if not args.against:
        print("msgx compare: --against REF is required (or --summary for the parallel run's verdict)",
              file=sys.stderr)
        return 2
    outcome = run(load_settings().db_url or "", args.against, day=args.day, known=args.known, key=args.key,
                  as_json=args.json)
    if outcome.output:
        print(outcome.output, end="")
    if outcome.error:
        print(f"msgx compare: {outcome.error}", file=sys.stderr)
    return outcome.code


def _compare_summary(args: argparse.Namespace) -> int:
    """``--summary``: the go-live verdict over the recorded comparisons of the last ``--since``."""
    from msgx_engine.compare import summary
    from msgx_engine.config import parse_duration

    if args.against or args.day or args.known or args.key:
        print("msgx compare: --summary reads the recorded comparisons; it takes only --since and --json",
              file=sys.stderr)
        return 2
    outcome = summary.run(load_settings().db_url or "", parse_duration(args.since, name="--since"), as_json=args.json)
    if outcome.output:
        print(outcome.output, end="")
    if outcome.error:
        print(f"msgx compare: {outcome.error}", file=sys.stderr)
    return outcome.code


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx compare``."""
    cmp = sub.add_parser(
        "compare", help="compare this installation's flights with another system's, field by field; exit 0 "
                        "nothing unexplained, 1 unexplained differences, 2 a side cannot be read",
        description="Reads both sides only. The reference is another msgx database (postgresql+psycopg://…), "
                    "a Redis projection hash (redis://…, field FLID, whole-state JSON) or a running service's "
                    "GET /all/flights (http(s)://…; bearer token from MSGX_COMPARE_TOKEN). Compares the live "
                    "days (yesterday, airport time, and later) unless --day is given; STATE_VERSION, msgx's own "
                    "change counter, is not compared. See docs/go-live.md.")
    cmp.add_argument("--against", metavar="REF", help="the reference: a postgresql+psycopg://, "
                     "redis:// or http(s):// URL")
    cmp.add_argument("--day", type=date.fromisoformat, help="compare only this flight day (YYYY-MM-DD)")
    cmp.add_argument("--json", action="store_true", help="print the report as JSON instead of markdown")
    cmp.add_argument("--known", type=Path, metavar="FILE", help="known-differences file (YAML), e.g. "
                     "deploy/compare/known-differences.yml; without it every difference is unexplained")
    cmp.add_argument("--key", metavar="NAME", help="the Redis hash of a redis:// reference (default flightInfo)")
    cmp.add_argument("--summary", action="store_true", help="instead of comparing now: the go-live verdict over "
                     "the comparisons the scheduled compare job recorded (exit 0 pass, 1 fail, 2 unreadable)")
    cmp.add_argument("--since", default="7d", metavar="DURATION", help="with --summary: the window, back from "
                     "now (7d, 48h; default 7d)")
    cmp.set_defaults(func=cmd_compare)
