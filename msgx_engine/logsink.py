"""Log lines to stderr that never hold up the process (OPS-2: "日志出口断开不阻塞业务", a log sink
that stops taking lines must not stop the business).

``logging.StreamHandler`` writes under the handler's lock and blocks while the pipe behind stderr
is full (a log collector that hangs, a journald that stalls, a terminal paused with Ctrl-S): the
first log line then stops the pump in the middle of its work, and every thread that logs after it
waits on the lock. ``StderrHandler`` asks the operating system first whether stderr has room
(``select`` with no wait) and writes at most ``PIPE_BUF`` bytes at a time, which a pipe with room
takes whole without blocking; a line that finds no room is dropped and counted, and the next line
that finds room says how many were lost. A regular file always has room, so a log file or a
terminal sees every line, as before. Where stderr is no file (a test's capture) it writes as
``StreamHandler`` would.
"""

from __future__ import annotations

import logging
import os
import select
import sys

CHUNK = select.PIPE_BUF            # a pipe with room takes this many bytes whole, without blocking


class StderrHandler(logging.Handler):
    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record) + "\n"
            stream = sys.stderr
            fd = _fileno(stream)
            if fd is None:
                stream.write(text)
                stream.flush()
                return
            if self.dropped and _has_room(fd):
                note = f"... {self.dropped} log line(s) dropped: the log output did not take them\n"
                if _write(fd, note.encode()):
                    self.dropped = 0
            if not _write(fd, text.encode("utf-8", "backslashreplace")):
                self.dropped += 1
        except Exception:  # noqa: BLE001 - logging's own convention: report, never raise
            self.handleError(record)


def _fileno(stream: object) -> int | None:
    try:
        return stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return None


def _has_room(fd: int) -> bool:
    try:
        return bool(select.select([], [fd], [], 0)[1])
    except (OSError, ValueError):
        return False


def _write(fd: int, data: bytes) -> bool:
    """Write ``data`` in chunks a pipe with room takes whole; False when stderr had no room (what
    was not written yet is dropped: a line may end cut short, never blocked)."""
    view = memoryview(data)
    while view:
        if not _has_room(fd):
            return False
        view = view[os.write(fd, view[:CHUNK]):]
    return True
