"""The demo's few words with the Dagster webserver it started, through its public GraphQL API.

Ctrl-C must not leave the long-lived runs (the pump, the monitor, request tracking) as FAILURE in
the history, nor print their tracebacks: before ``dagster dev`` is asked to stop, the demo asks
the webserver to terminate every run still queued or in flight, the way the UI's "Terminate"
button does. The run worker is then interrupted by Dagster itself and records CANCELED.

HTTP and JSON only: the engine never imports Dagster, and this is the interface the UI uses.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ACTIVE = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
REQUEST_TIMEOUT_S = 10.0
POLL_S = 0.25
# A run is interrupted only once its worker has run this long: an interrupt that reaches a worker
# still starting (before its op has put msgx's handler in place, ``stops_when_terminated``) is
# raised by Dagster at the op's first boundary, and the run ends with a stack trace in the output.
START_GRACE_S = 1.0

_ACTIVE_RUNS = """
query DemoActiveRuns($statuses: [RunStatus!]) {
  runsOrError(filter: {statuses: $statuses}) {
    __typename
    ... on Runs { results { runId jobName status startTime } }
  }
}
"""

_TERMINATE = """
mutation DemoTerminate($runIds: [String!]!, $policy: TerminateRunPolicy) {
  terminateRuns(runIds: $runIds, terminatePolicy: $policy) {
    __typename
    ... on TerminateRunsResult {
      terminateRunResults {
        __typename
        ... on TerminateRunFailure { message }
        ... on PythonError { message }
      }
    }
  }
}
"""


class WebserverError(RuntimeError):
    """The webserver did not answer, or answered with an error."""


@dataclass(frozen=True)
class Run:
    run_id: str
    job: str
    status: str
    started_at: float | None = None     # the worker's start (epoch seconds; None before it started)

    def interruptible(self, now: float) -> bool:
        """Queued (no worker yet: cancelled at once), or started at least ``START_GRACE_S`` ago;
        a run still starting is asked at a later poll."""
        if self.status == "QUEUED":
            return True
        return self.status == "STARTED" and self.started_at is not None and now - self.started_at >= START_GRACE_S


class Webserver:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.url = f"http://{host}:{port}/graphql"
        self.timeout_s = timeout_s

    def _post(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": dict(variables)}).encode("utf-8")
        req = urllib.request.Request(self.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:   # noqa: S310 (our own loopback)
                answer = json.loads(resp.read())
        except (OSError, ValueError) as exc:
            raise WebserverError(f"{type(exc).__name__}: {exc}") from None
        if answer.get("errors"):
            raise WebserverError("; ".join(str(e.get("message")) for e in answer["errors"]))
        return dict(answer.get("data") or {})

    def active_runs(self) -> list[Run]:
        found = self._post(_ACTIVE_RUNS, {"statuses": list(ACTIVE)}).get("runsOrError") or {}
        if found.get("__typename") != "Runs":
            raise WebserverError(f"runs not listed: {found.get('__typename')}")
        return [Run(r["runId"], r["jobName"], r["status"], r.get("startTime")) for r in found.get("results", [])]

    def terminate(self, run_ids: Iterable[str], *, force: bool = False) -> list[str]:
        """Ask Dagster to terminate the runs (``force``: mark them CANCELED at once, whether or not
        their processes have stopped); returns the refusals' messages (empty: all accepted)."""
        ids = list(run_ids)
        if not ids:
            return []
        policy = "MARK_AS_CANCELED_IMMEDIATELY" if force else "SAFE_TERMINATE"
        result = self._post(_TERMINATE, {"runIds": ids, "policy": policy}).get("terminateRuns") or {}
        return [str(r.get("message") or r.get("__typename")) for r in result.get("terminateRunResults", [])
                if r.get("__typename") != "TerminateRunSuccess"]

    def terminate_all(self, deadline_s: float) -> tuple[list[Run], list[Run]]:
        """Terminate every queued or in-flight run and wait (up to ``deadline_s``) until each has
        ended by itself; a run still going at the deadline (a worker that was only starting up
        when asked) is marked CANCELED there and then. Returns (the runs asked to stop, those
        marked CANCELED at the deadline). A run started meanwhile is terminated too, once its
        worker is past its start (``Run.interruptible``)."""
        asked: dict[str, Run] = {}
        end = time.monotonic() + deadline_s
        while True:
            active = self.active_runs()
            now = time.time()
            fresh = [r for r in active if r.run_id not in asked and r.status != "CANCELING" and r.interruptible(now)]
            for run in fresh:
                asked[run.run_id] = run
            self.terminate(r.run_id for r in fresh)
            if not active:
                return list(asked.values()), []
            if time.monotonic() >= end:
                self.terminate((r.run_id for r in active), force=True)
                return list(asked.values()), active
            time.sleep(POLL_S)
