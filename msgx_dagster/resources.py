"""Resources: the engine's App, chosen from the environment in this one place (DESIGN §4).

Production sets MSGX_DB_URL/MSGX_MAILBOX_URL (and Kafka/Redis). Without them the code location
refuses to load unless the embedded default was asked for (``msgx demo`` sets MSGX_EMBEDDED=1
for the Dagster processes it starts): a deployment that lost its environment must fail loudly,
not process into a private server. Nothing else in msgx_dagster decides which
servers to talk to.

Every run carries the tag ``msgx/mode`` (production or shadow, D29, shadow mode), written when the run
starts using the resource, so it is there however the run was launched (schedule, sensor,
Launchpad, ``dagster job execute``); the engine's log lines carry ``mode=`` too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from msgx_engine.app import App
from msgx_engine.config import Settings
from msgx_engine.logcontext import ensure_handler, install_mode

MODE_TAG = "msgx/mode"


def code_location_settings() -> Settings:
    """The settings the code location loads with: a refused configuration (unknown MSGX_MODE, a
    shadow on production topics, no URLs without MSGX_EMBEDDED) stops the load with its message."""
    settings = Settings.from_env()
    settings.require_urls()
    install_mode(settings.mode)
    return settings


class MsgxResource(dg.ConfigurableResource):
    """Hands out an engine App for the length of a ``with`` block; the App's connection pools
    are disposed when the block ends, whatever happens inside it."""

    def settings(self) -> Settings:
        return Settings.from_env()

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """At the start of every run (and sensor tick) using the resource: the mode goes into the
        log context and onto the run's tags."""
        settings = self.settings()
        install_mode(settings.mode)
        ensure_handler()
        if context.instance is not None and context.run_id:
            context.instance.add_run_tags(context.run_id, {MODE_TAG: settings.mode})

    @contextmanager
    def open_app(self) -> Iterator[App]:
        app = App.from_settings(self.settings())
        try:
            yield app
        finally:
            app.dispose()


def resources_for_env() -> dict[str, object]:
    return {"msgx": MsgxResource()}
