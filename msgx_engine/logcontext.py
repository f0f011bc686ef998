"""The installation's mode in every log line (OPS-3, D29, shadow mode): ``mode=production`` or ``mode=shadow``.

A shadow instance runs the same code against the same mailbox as production; its log lines must
never be mistaken for production's. The mode is put on every ``LogRecord`` by a record factory
(not a filter: a filter on one logger misses the records of its children, and one on a handler
misses the handlers added later, e.g. by Dagster or uvicorn), so any formatter may show it with
``%(mode)s``; ``LOG_FORMAT`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from msgx_engine.logsink import StderrHandler

LOG_FORMAT = "%(asctime)s %(levelname)s mode=%(mode)s %(name)s: %(message)s"

_state: dict[str, str] = {}
_base_factory: Callable[..., logging.LogRecord] | None = None


def install_mode(mode: str) -> None:
    """From now on every record of this process carries ``record.mode``; calling it again only
    changes the mode (the factory is wrapped once)."""
    global _base_factory
    _state["mode"] = mode
    if _base_factory is not None:
        return
    _base_factory = logging.getLogRecordFactory()
    base = _base_factory

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        record.mode = _state["mode"]
        return record

    logging.setLogRecordFactory(factory)


def ensure_handler(level: int = logging.WARNING) -> None:
    """A process that configured no logging (a Dagster run worker) would print engine warnings
    through ``logging.lastResort`` without any context: give the root logger one stderr handler
    with ``LOG_FORMAT`` instead. A process that configured its own handlers is left alone."""
    root = logging.getLogger()
    if not root.handlers:
        handler = StderrHandler()      # a full stderr pipe drops lines instead of blocking the run (OPS-2)
        handler.setLevel(level)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
