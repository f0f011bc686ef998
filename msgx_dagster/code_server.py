"""The code server's command: Dagster's ``dagster code-server start`` that a SIGTERM stops (T6, code server SIGTERM).

Dagster's code server stops on SIGTERM by treating it as SIGINT: at start it gives SIGTERM
whatever handler SIGINT has (``dagster._utils.interrupts.setup_interrupt_handlers``). A process
started with SIGINT ignored, as every command a non-interactive shell starts in the background is
(``… &`` in a script, a supervisor started that way), therefore ignores SIGTERM too, and so does
the code server process it starts beside itself. Its run workers do not: a run installs Dagster's
own interrupt handler, so the pump ends on the signal, ``inbox_sensor`` asks for the next pump,
the code server that was meant to stop launches it and waits for it, and only a SIGKILL ends it,
the new pump with it, in the middle of its work.

This command gives SIGINT and SIGTERM their default handling back and then becomes Dagster's code
server (``exec``: the same process, so systemd's main process and a container's first process
stay the one that was started), with the arguments it was given::

    python -m msgx_dagster.code_server --host 127.0.0.1 --port 4266 --module-name msgx_dagster.definitions ...
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    os.execv(sys.executable, [sys.executable, "-m", "dagster", "code-server", "start", *args])


if __name__ == "__main__":
    main()
