"""Resources: the engine's App, chosen from the environment in this one place (DESIGN §4).

Production sets MSGX_DB_URL/MSGX_MAILBOX_URL (and Kafka/Redis); without them the embedded
default is used. Nothing else in msgx_dagster decides which servers to talk to.
"""

from __future__ import annotations

import dagster as dg

from msgx_engine.app import App
from msgx_engine.config import Settings


class MsgxResource(dg.ConfigurableResource):
    """Builds an engine App per use; the App owns connection pools, disposed by the caller."""

    def settings(self) -> Settings:
        return Settings.from_env()

    def app(self) -> App:
        return App.from_settings(self.settings())


def resources_for_env() -> dict[str, object]:
    return {"msgx": MsgxResource()}
