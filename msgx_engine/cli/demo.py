"""``msgx demo``: the demo day on the embedded PostgreSQL, with or without the Dagster UI."""

from __future__ import annotations

import argparse

from msgx_engine.config import Settings


def cmd_demo(args: argparse.Namespace) -> int:
    from msgx_engine.demo.run import fix_fault, run_demo, stop_embedded

    if args.stop:
        return stop_embedded(Settings.from_env().home)
    if args.fix_fault:
        return fix_fault(Settings.from_env().home)
    return run_demo(Settings.from_env(), headless=args.headless, port=args.port, seed=args.seed)


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx demo``."""
    demo = sub.add_parser("demo", help="load demo messages into the embedded default and run the platform")
    demo.add_argument("--headless", action="store_true", help="run the pump once, print a summary and exit")
    demo.add_argument("--port", type=int, default=3000, help="the Dagster UI's port on 127.0.0.1 (default 3000)")
    demo.add_argument("--stop", action="store_true", help="stop the embedded PostgreSQL server and exit")
    demo.add_argument("--fix-fault", action="store_true",
                      help="the fix step of the demo's rehearsed failure: stop the state database refusing "
                           "the flight's cancellation, then replay the dead letter")
    demo.add_argument("--seed", type=int, help="seed of the generated day (same seed, same messages and counts)")
    demo.set_defaults(func=cmd_demo)
