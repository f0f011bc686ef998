"""Resources: the engine's App, chosen from the environment in this one place (DESIGN §4).

Production sets MSGX_DB_URL/MSGX_MAILBOX_URL (and Kafka/Redis); without them the embedded
default is used. Nothing else in msgx_dagster decides which servers to talk to.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from msgx_engine.app import App
from msgx_engine.config import Settings


class MsgxResource(dg.ConfigurableResource):
    """Hands out an engine App for the length of a ``with`` block; the App's connection pools
    are disposed when the block ends, whatever happens inside it."""

    def settings(self) -> Settings:
        return Settings.from_env()

    @contextmanager
    def open_app(self) -> Iterator[App]:
        app = App.from_settings(self.settings())
        try:
            yield app
        finally:
            app.dispose()


def resources_for_env() -> dict[str, object]:
    return {"msgx": MsgxResource()}
