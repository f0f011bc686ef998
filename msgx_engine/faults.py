"""Fault injection for the crash matrix: ``MSGX_FAULT_STEP=<step>[:<n>]`` kills the process with
SIGKILL the n-th time (default 1st) the pipeline reaches that step. Steps: before_tx1_commit,
between_tx1_tx2, after_tx2, inside_backfill. Unset in production: the check is two dict lookups.

``MSGX_FAULT_HOLD=<step>:<n>:<file>`` instead holds the process at the n-th time it reaches the
step, for as long as ``<file>`` exists, and creates ``<file>.held`` when it gets there: the fault
matrix breaks a server under a pump that is certainly mid-run, however fast the pump drains.
Several holds are separated by commas (a second one keeps the pump alive until the server is back)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

HOLD_LIMIT_S = 300.0
_counts: dict[str, int] = {}


def _target(raw: str | None) -> tuple[str, int, str] | None:
    if not raw:
        return None
    step, _, rest = raw.partition(":")
    n, _, path = rest.partition(":")
    return step, int(n or 1), path


def _count(key: str) -> int:
    _counts[key] = _counts.get(key, 0) + 1
    return _counts[key]


def reach(step: str) -> None:
    kill = _target(os.environ.get("MSGX_FAULT_STEP"))
    if kill is not None and kill[0] == step and _count(step) >= kill[1]:
        os.kill(os.getpid(), signal.SIGKILL)
    holds = os.environ.get("MSGX_FAULT_HOLD")
    if not holds:
        return
    targets = [t for t in map(_target, holds.split(",")) if t is not None and t[0] == step]
    if targets:
        n = _count(f"hold:{step}")
        for _, at, path in targets:
            if n == at:
                _hold(Path(path))


def _hold(gate: Path) -> None:
    """Wait while ``gate`` exists (at most ``HOLD_LIMIT_S``), having said so with ``<gate>.held``."""
    gate.with_name(gate.name + ".held").touch()
    deadline = time.monotonic() + HOLD_LIMIT_S
    while gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
