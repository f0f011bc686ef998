"""What several command groups share: the settings and the app built from the environment, and
the check that an audited action is signed."""

from __future__ import annotations

import argparse

from msgx_engine.config import Settings


def is_signed(args: argparse.Namespace) -> bool:
    """An audited action names its operator and reason (neither blank)."""
    return bool((args.operator or "").strip() and (args.reason or "").strip())


def load_settings() -> Settings:
    return Settings.from_env().resolved()


def open_app():
    from msgx_engine.app import App

    return App.from_settings(load_settings())
