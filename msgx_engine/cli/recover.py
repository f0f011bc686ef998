"""``msgx recover``: mailbox rows processed there but unknown to a state database restored from an
older backup, found and replayed."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from msgx_engine.cli.common import is_signed, load_settings, open_app
from msgx_engine.config import ConfigError, Settings

if TYPE_CHECKING:
    from msgx_engine.store.version_floor import Published


def cmd_recover(args: argparse.Namespace) -> int:
    from msgx_engine.operations.recover import RecoverBusy, RecoverRefused, find_lost, recover
    from msgx_engine.pipeline.pump import PumpBusy, PumpOptions

    if load_settings().shadow:
        raise ConfigError("msgx recover finds lost work by production's mailbox marks; a shadow instance "
                          "(MSGX_MODE=shadow) reads the mailbox by id and has no marks of its own to lose")
    app = open_app()
    try:
        app.check_ready()
        if not args.apply:
            with app.engine.connect() as conn:
                lost = find_lost(conn, app.mailbox)
            print(lost.describe())
            if lost.ids:
                print("to replay them: msgx recover --apply --operator NAME --reason TEXT")
            return 0
        if not is_signed(args):
            print("msgx recover: --apply needs --operator NAME and --reason TEXT", file=sys.stderr)
            return 2
        def rebuild() -> int:
            return app.rebuild_projection() or 0

        try:
            result = recover(app.engine, app.mailbox, operator=args.operator, reason=args.reason,
                             now=app.clock.now(), replay=lambda: app.pump(PumpOptions()).run(),
                             rebuild=rebuild if app.settings.redis_url else None,
                             published=_topics_published(app.settings))
        except (RecoverBusy, PumpBusy) as exc:
            print(f"msgx recover: {exc}", file=sys.stderr)
            return 3
        except RecoverRefused as exc:
            print(f"msgx recover: refused, nothing changed: {exc}", file=sys.stderr)
            return 2
    finally:
        app.dispose()
    if not result.registered:
        print(f"{result.lost.describe()}; audit {result.audit_id}")
        return 0
    print(f"recovered {len(result.registered)} message(s) ({result.lost.describe()}); audit {result.audit_id}")
    print(json.dumps(result.outcome, sort_keys=True))
    return 0


def _topics_published(settings: Settings) -> Callable[[], Published] | None:
    """What the production topics show published, for ``msgx recover`` (None: Kafka is not configured)."""
    from msgx_engine.delivery.published import TopicsUnreadable, read_published
    from msgx_engine.operations.recover import topics_unreadable

    bootstrap = settings.kafka_bootstrap
    if not bootstrap:
        return None

    def read() -> Published:
        try:
            return read_published(bootstrap, [settings.topic_msg, settings.topic_schd])
        except TopicsUnreadable as exc:
            raise topics_unreadable(str(exc)) from exc

    return read


def register(sub: argparse._SubParsersAction) -> None:
    """``msgx recover``."""
    recover = sub.add_parser("recover", help="preview (default) or replay mailbox rows processed there but unknown "
                                             "to a restored state database (audited)")
    recover.add_argument("--apply", action="store_true",
                         help="register them, replay in id order, rebuild the projection")
    recover.add_argument("--operator", help="who does it (recorded in the audit trail)")
    recover.add_argument("--reason", help="why (with --apply)")
    recover.set_defaults(func=cmd_recover)
