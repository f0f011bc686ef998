"""The commands that run the platform by hand: ``msgx pump``, ``msgx dispatch`` and ``msgx serve``."""

from __future__ import annotations

import argparse
import sys

from msgx_engine.cli.common import load_settings, open_app


def print_status_table(counts: dict[str, int], reasons: list[tuple[str, str | None, int]] | None = None) -> None:
    print(f"{'status':<12}{'count':>8}")
    from msgx_engine.store.queue import Status

    for status in (Status.SUCCEEDED, Status.SKIPPED, Status.DEAD, Status.FAILED, Status.PENDING):
        print(f"{status:<12}{counts.get(status, 0):>8}")
    if reasons:
        print(f"\n{'status':<12}{'reason':<28}{'count':>8}")
        for word, reason, n in reasons:
            print(f"{word:<12}{(reason or '-'):<28}{n:>8}")


def reason_counts(app) -> list[tuple[str, str | None, int]]:
    from msgx_engine.store import queue_figures

    with app.engine.connect() as conn:
        return queue_figures.reason_counts(conn)


def run_pump(app, *, drain: bool, idle_for_s: float = 0.0, max_runtime_s: float = 3600.0) -> int:
    from msgx_engine.pipeline.intake import StateBehindMailbox
    from msgx_engine.pipeline.pump import PumpBusy, PumpOptions, status_counts

    app.check_ready()
    opts = PumpOptions(idle_for_s=0.0 if drain else idle_for_s, max_runtime_s=max_runtime_s)
    try:     # a dispatcher process (msgx dispatch) hears each release at once (P19, release NOTIFY)
        with app.release_notifier() as announce:
            summary = app.pump(opts, on_release=announce).run()
    except PumpBusy as exc:
        print(f"msgx pump: {exc}", file=sys.stderr)
        return 3
    except StateBehindMailbox as exc:
        print(f"msgx pump: {exc}", file=sys.stderr)
        return 4
    with app.engine.connect() as conn:
        counts = status_counts(conn)
    print(f"pump finished in {summary.elapsed_s:.2f}s: registered {summary.registered}, "
          f"processed {sum(summary.processed.values())}, marked {summary.marked}")
    print_status_table(counts, reason_counts(app))
    return 0


def cmd_pump(args: argparse.Namespace) -> int:
    return run_pump(open_app(), drain=args.drain, idle_for_s=args.idle_for, max_runtime_s=args.max_runtime)


def cmd_dispatch(args: argparse.Namespace) -> int:
    from msgx_engine.delivery.runner import run_dispatch

    return run_dispatch(load_settings(), drain=args.drain)


def cmd_serve(args: argparse.Namespace) -> int:
    from msgx_engine.http.server import serve

    return serve(host=args.host, port=args.port, allow_public=args.allow_public, tls_cert=args.tls_cert,
                 tls_key=args.tls_key, behind_tls_proxy=args.behind_tls_proxy)


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx pump``, ``msgx dispatch`` and ``msgx serve``."""
    pump = sub.add_parser("pump", help="process the mailbox's messages in order, by hand (as pump_job does)")
    pump.add_argument("--drain", action="store_true", help="process until nothing is processable, then exit 0")
    pump.add_argument("--idle-for", type=float, default=600.0, help="idle-poll seconds before exiting")
    pump.add_argument("--max-runtime", type=float, default=3600.0, help="seconds after which it exits even "
                                                                        "while work remains")
    pump.set_defaults(func=cmd_pump)

    dispatch = sub.add_parser("dispatch", help="deliver released events to Kafka")
    dispatch.add_argument("--drain", action="store_true", help="deliver everything due now, then exit (1 when "
                                                               "events remain undelivered)")
    dispatch.set_defaults(func=cmd_dispatch)

    serve = sub.add_parser("serve", help="serve the HTTP API, /metrics and the health probes")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="the port to listen on (default 8080)")
    serve.add_argument("--allow-public", action="store_true",
                       help="permit a non-loopback bind; needs MSGX_API_TOKEN and either --tls-cert/--tls-key "
                            "or --behind-tls-proxy")
    serve.add_argument("--tls-cert", metavar="FILE",
                       help="serve HTTPS with this PEM certificate (chain), read at start; needs --tls-key")
    serve.add_argument("--tls-key", metavar="FILE",
                       help="the certificate's PEM private key, unencrypted, readable only by this service")
    serve.add_argument("--behind-tls-proxy", action="store_true",
                       help="state that a proxy in front terminates TLS (lets --allow-public run without "
                            "--tls-cert)")
    serve.set_defaults(func=cmd_serve)
