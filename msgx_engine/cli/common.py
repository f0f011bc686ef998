"""What several command groups share: the settings and the app built from the environment, and
the check that an audited action is signed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from msgx_engine.config import Settings

if TYPE_CHECKING:
    from msgx_engine.app import App

T = TypeVar("T")


def is_signed(args: argparse.Namespace) -> bool:
    """An audited action names its operator and reason (neither blank)."""
    return bool((args.operator or "").strip() and (args.reason or "").strip())


def load_settings() -> Settings:
    return Settings.from_env().resolved()


def open_app():
    from msgx_engine.app import App

    return App.from_settings(load_settings())


def signed_action(command: str, args: argparse.Namespace, action: Callable[[App], T], *,
                  busy: tuple[type[Exception], ...], refused: tuple[type[Exception], ...]) -> tuple[int, T | None]:
    """An audited action on a ready installation: (0, its result), or the exit code after saying
    why on stderr: 2 unsigned or refused (nothing changed), 3 busy (a pump or another action holds
    the lock; run it again once that has stopped)."""
    if not is_signed(args):
        print(f"msgx {command}: needs --operator NAME and --reason TEXT", file=sys.stderr)
        return 2, None
    app = open_app()
    try:
        app.check_ready()
        return 0, action(app)
    except busy as exc:
        print(f"msgx {command}: {exc}", file=sys.stderr)
        return 3, None
    except refused as exc:
        print(f"msgx {command}: {exc}", file=sys.stderr)
        return 2, None
    finally:
        app.dispose()
