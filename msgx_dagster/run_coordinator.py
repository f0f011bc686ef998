"""The run queue that records who launched each run (OPS-2), from what the launching side vouches for.

Dagster's webserver has no login of its own. A site puts the operators' webserver behind its
authenticating proxy, which passes the signed-in user in a request header (``X-Forwarded-User``
by default; ``user_header`` in dagster.yaml names another). This coordinator is Dagster's
``QueuedRunCoordinator`` (the queue and the ``singleton`` limits work as before) that, when a run
is submitted, overwrites the run tag ``msgx/launched_by`` with:

- the header's value, for a launch through the webserver behind the proxy;
- ``sensor:<name>`` / ``schedule:<name>``, for the daemon's own runs (Dagster's own tags say which);
- ``unauthenticated`` otherwise (a webserver reached without the proxy, ``dagster job launch``
  on the host, which needs a shell there anyway).

A tag the client sent itself is always replaced, so the tag never says more than the
coordinator saw. Loaded by the webserver and the daemon, it imports Dagster only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import DagsterRun, Field, QueuedRunCoordinator, StringSource, SubmitRunContext
from dagster._config import UserConfigSchema
from dagster._serdes import ConfigurableClassData

SENSOR_NAME_TAG = "dagster/sensor_name"        # Dagster's own tags on the daemon's runs
SCHEDULE_NAME_TAG = "dagster/schedule_name"

LAUNCHED_BY_TAG = "msgx/launched_by"
DEFAULT_USER_HEADER = "X-Forwarded-User"
UNAUTHENTICATED = "unauthenticated"


def launched_by(tags: Mapping[str, str], header_user: str | None) -> str:
    """Who launched a run with these tags, given the proxy's header value (None: no header)."""
    if header_user and header_user.strip():
        return header_user.strip()
    if SENSOR_NAME_TAG in tags:
        return f"sensor:{tags[SENSOR_NAME_TAG]}"
    if SCHEDULE_NAME_TAG in tags:
        return f"schedule:{tags[SCHEDULE_NAME_TAG]}"
    return UNAUTHENTICATED


class AttributingRunCoordinator(QueuedRunCoordinator):
    """QueuedRunCoordinator plus the ``msgx/launched_by`` tag (see the module doc)."""

    def __init__(self, user_header: str = DEFAULT_USER_HEADER, **kwargs: Any) -> None:
        self.user_header = user_header
        super().__init__(**kwargs)

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        queued = QueuedRunCoordinator.config_type()
        assert isinstance(queued, Mapping)
        return {**queued,
                "user_header": Field(StringSource, is_required=False, default_value=DEFAULT_USER_HEADER,
                                     description="The request header in which the authenticating proxy "
                                                 "passes the signed-in user.")}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData,
                          config_value: Mapping[str, Any]) -> AttributingRunCoordinator:
        return cls(inst_data=inst_data, **config_value)     # the config keys are the constructor's

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        who = launched_by(run.tags, context.get_request_header(self.user_header))
        self._instance.add_run_tags(run.run_id, {LAUNCHED_BY_TAG: who})
        return super().submit_run(context)       # it reloads the run, tag included
