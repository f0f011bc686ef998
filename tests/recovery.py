"""The fault suite's recovery times, one greppable line per fault for docs/faults.md's column:
``RECOVERY <fault>: <seconds> s (<from> -> <to>)`` on stderr (seen under ``pytest -s``), timed on
the monotonic clock from the moment the fault ends (the server back, the fault lifted, the operator's
command) to the moment msgx has recovered (the last row processed, the last event delivered, a pump
holding the writer lock again). Only printed: no test asserts a bound with it (the bounds a test
already has stay its own), so a slow machine reports a slow figure instead of failing.

    lifted = time.monotonic()
    ...                                    # wait for msgx to recover
    recovery("PostgreSQL killed", lifted, "PostgreSQL answers -> last row processed")
"""

from __future__ import annotations

import sys
import time


def recovery(fault: str, since: float, span: str) -> float:
    """Print the RECOVERY line of ``fault``: the seconds from ``since`` (a ``time.monotonic()``
    reading taken when the fault ended) to now; ``span`` says what the two moments are."""
    took = time.monotonic() - since
    # the process's own stderr: a test that captures sys.stderr (capsys) does not swallow the line
    print(f"\nRECOVERY {fault}: {took:.1f} s ({span})", file=sys.__stderr__ or sys.stderr, flush=True)
    return took
