"""Helpers shared by the op jobs: the singleton tag and per-batch asset events."""

import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg

from msgx_dagster.run_limits import SINGLETON_TAG

ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def active_runs(instance: dg.DagsterInstance, job_name: str, tags: Mapping[str, str] | None = None) -> int:
    """1 when a run of ``job_name`` (with ``tags``, if given) is queued or in flight, else 0 (a
    sensor or schedule then skips instead of piling up queued runs behind the singleton limit)."""
    runs = dg.RunsFilter(job_name=job_name, statuses=ACTIVE, tags=dict(tags or {}))
    return len(instance.get_run_records(filters=runs, limit=1))


# The scheduled runs that repeat a round (the health checks, request tracking) loop for just under
# ten minutes, and their minute schedules skip while one is active (P18, looping runs): each run start costs a
# few seconds of CPU, which on a 2-core machine the pump pays in latency.
LOOPING_RUN_S = 595.0


def looping_run_config(op_name: str) -> dict[str, Any]:
    """The run config of a scheduled looping run of the job whose one op is ``op_name``."""
    return {"ops": {op_name: {"config": {"run_for_s": LOOPING_RUN_S}}}}


@contextmanager
def stops_when_terminated(context: dg.OpExecutionContext) -> Iterator[threading.Event]:
    """A looping op ends quietly when its run is terminated (the UI's Terminate button, or Ctrl-C
    on ``msgx demo``, which terminates the runs first).

    Dagster terminates a run by interrupting its worker (SIGINT), which by default raises
    DagsterExecutionInterruptedError wherever the op happens to be: inside a PostgreSQL statement
    psycopg turns it into a cancelled query, the op fails with a traceback and a message may even
    be charged a failed attempt. Instead, while the op runs, the interrupt only sets the event
    this yields; the op's loop (``should_stop``) finishes its current unit of work and returns,
    the op logs one line and the run ends SUCCESS. Outside the main thread (signals cannot be
    caught there) and for an interrupt that arrives before the handler is in place, Dagster's
    error is caught instead: every unit of work is its own transaction, so nothing is lost."""
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    try:
        yield stop
    except dg.DagsterExecutionInterruptedError:
        stop.set()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if stop.is_set():
        context.log.info("stopped: the run was terminated; finished work is committed, the rest waits for "
                         "the next run")


def singleton(name: str) -> dict[str, str]:
    """Run tag limited to one run per value by the instance's tag_concurrency_limits (dagster.yaml)."""
    return {SINGLETON_TAG: name}


def materialize(context: dg.OpExecutionContext, key: dg.AssetKey, metadata: Mapping[str, Any],
                *, observe: bool = False) -> None:
    """One asset event per batch/heartbeat, never per message (each costs 5-12 ms of storage)."""
    event_cls = dg.AssetObservation if observe else dg.AssetMaterialization
    context.log_event(event_cls(asset_key=key, metadata=dict(metadata)))
