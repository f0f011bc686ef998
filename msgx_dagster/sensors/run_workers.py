"""run_worker_sensor: fails the runs whose worker died with its code server (OPS-1, T5, failing other dead runs).

A run worker killed on its own is reported failed by its code server within a second. When the
code server dies with its run workers (``kill -9`` of the service, a container restart), nothing
is left to report them: their runs stay STARTED, and with one run at a time per job (the
``singleton`` limit) every later run of the job waits behind them for good. This sensor is
evaluated in the code server that starts the runs, so it can look at the processes Dagster
recorded as their workers (``orphans.end_runs_without_worker``) and fail a run whose worker is
gone, at most ``INTERVAL_S`` after the code server is back.

The pump's runs are judged by ``inbox_sensor`` and the request-tracking runs by their schedule:
each starts the successor in the same evaluation. Run monitoring (the daemon, ``run_monitoring``
in deploy/dagster.yaml) fails a run stuck starting, which has no worker to look at yet.
"""

import dagster as dg

from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.jobs.requests import request_tracking_job
from msgx_dagster.orphans import end_runs_without_worker

INTERVAL_S = 15
JUDGED_ELSEWHERE = frozenset({pump_job.name, request_tracking_job.name})


@dg.sensor(minimum_interval_seconds=INTERVAL_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Fails a run whose worker died with its code server, so the job's next run can start.")
def run_worker_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    ended = end_runs_without_worker(context, JUDGED_ELSEWHERE)
    return dg.SkipReason(f"ended {len(ended)} run(s) whose worker is gone: {', '.join(ended)}" if ended
                         else "every run in progress has its worker")
