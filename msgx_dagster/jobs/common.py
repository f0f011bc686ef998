"""Helpers shared by the op jobs: the singleton tag and per-batch asset events."""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from msgx_dagster.run_limits import SINGLETON_TAG


def singleton(name: str) -> dict[str, str]:
    """Run tag limited to one run per value by the instance's tag_concurrency_limits (dagster.yaml)."""
    return {SINGLETON_TAG: name}


def materialize(context: dg.OpExecutionContext, key: dg.AssetKey, metadata: Mapping[str, Any],
                *, observe: bool = False) -> None:
    """One asset event per batch/heartbeat, never per message (each costs 5-12 ms of storage)."""
    event_cls = dg.AssetObservation if observe else dg.AssetMaterialization
    context.log_event(event_cls(asset_key=key, metadata=dict(metadata)))
