"""Fault injection for the crash matrix: ``MSGX_FAULT_STEP=<step>[:<n>]`` kills the process with
SIGKILL the n-th time (default 1st) the pipeline reaches that step. Steps: before_tx1_commit,
between_tx1_tx2, after_tx2, inside_backfill. Unset in production: the check is one dict lookup."""

from __future__ import annotations

import os
import signal

_counts: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    raw = os.environ.get("MSGX_FAULT_STEP")
    if not raw:
        return None
    step, _, n = raw.partition(":")
    return step, int(n or 1)


def reach(step: str) -> None:
    target = _target()
    if target is None or target[0] != step:
        return
    _counts[step] = _counts.get(step, 0) + 1
    if _counts[step] >= target[1]:
        os.kill(os.getpid(), signal.SIGKILL)
