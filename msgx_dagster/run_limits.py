"""Does the Dagster instance a run executes in hold the `singleton` run limit?

Every msgx job carries a ``singleton: <name>`` tag; the instance config (``deploy/dagster.yaml``,
or the one ``msgx demo`` writes) limits each value to one run at a time. An instance without
that limit (plain ``dagster dev`` with no dagster.yaml, ``execute_in_process``) would start a
second pump run next to the first. Nothing breaks, since the pump's PostgreSQL advisory lock
admits one writer and a second run exits at once, but an operator should learn it from the
log instead of from failed runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg

SINGLETON_TAG = "singleton"


def limits_singleton(instance: dg.DagsterInstance, tags: Mapping[str, str]) -> bool:
    """True when the instance queues runs and allows at most one run at a time with this run's
    ``singleton`` tag value."""
    value = tags.get(SINGLETON_TAG)
    queue = instance.get_concurrency_config().run_queue_config
    if value is None or queue is None:
        return False
    for limit in queue.tag_concurrency_limits:
        if limit.get("key") != SINGLETON_TAG or int(limit.get("limit", 0)) > 1:
            continue
        scope = limit.get("value")
        if scope is None or scope == value or (isinstance(scope, Mapping) and scope.get("applyLimitPerUniqueValue")):
            return True
    return False


def warn_without_singleton_limit(context: dg.OpExecutionContext) -> bool:
    """Log a WARNING when this run's instance has no `singleton` limit; returns whether it did."""
    tags = context.run.tags
    if limits_singleton(context.instance, tags):
        return False
    context.log.warning(
        f"this Dagster instance has no run limit on the tag {SINGLETON_TAG}={tags.get(SINGLETON_TAG)!r} "
        "(concurrency.runs.tag_concurrency_limits in dagster.yaml): it may start a second "
        f"{context.job_name} run beside this one. The PostgreSQL advisory lock still admits one "
        "writer (a second pump exits at once), but set DAGSTER_HOME to a folder holding "
        "deploy/dagster.yaml, or use `msgx demo`'s instance.")
    return True
