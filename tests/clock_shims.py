"""Wall clocks a test can step: Python source installed as a subprocess's ``sitecustomize``.

Each moves what Python reads as wall time (``time.time``, ``time.time_ns``) by the offset, in
seconds, written in the file named by ``MSGX_TEST_WALL_OFFSET_FILE``, and leaves the monotonic clock
alone, as a real clock step does. ``WALL_CLOCK_SHIM`` (a pump) also moves ``datetime.now``,
``utcnow`` and ``today``; ``DAEMON_CLOCK_SHIM`` (the Dagster daemon) moves Dagster's own reading of
the current time instead (``dagster._time``, which its scheduler and sensors ask; a ``datetime``
subclass breaks Dagster's type checks) and leaves the C libraries (gRPC) alone. Where
``MSGX_TEST_WALL_SEEN_FILE`` is set, each offset the process takes up is written there, so a test
knows the process read its stepped clock.
"""

from __future__ import annotations

import textwrap

_STEPPED_TIME = textwrap.dedent('''
    import os as _os
    import time as _time

    _FILE = _os.environ["MSGX_TEST_WALL_OFFSET_FILE"]
    _SEEN = _os.environ.get("MSGX_TEST_WALL_SEEN_FILE")
    _real_time = _time.time
    _cache = {"at": -1.0, "offset": 0.0}


    def _offset():
        now = _time.monotonic()
        if now - _cache["at"] > 0.05:
            try:
                with open(_FILE) as f:
                    offset = float(f.read().strip() or 0)
                if _SEEN and offset != _cache["offset"]:
                    with open(_SEEN, "w") as f:
                        f.write(repr(offset))
                _cache["offset"] = offset
            except (OSError, ValueError):
                pass
            _cache["at"] = now
        return _cache["offset"]


    _time.time = lambda: _real_time() + _offset()
    _time.time_ns = lambda: int((_real_time() + _offset()) * 1e9)
''')

WALL_CLOCK_SHIM = _STEPPED_TIME + textwrap.dedent('''
    import datetime as _dt

    _base = _dt.datetime


    class _SteppedDatetime(_base):
        @classmethod
        def now(cls, tz=None):
            return _base.fromtimestamp(_real_time() + _offset(), tz)

        @classmethod
        def utcnow(cls):
            return _base.fromtimestamp(_real_time() + _offset(), _dt.timezone.utc).replace(tzinfo=None)

        @classmethod
        def today(cls):
            return cls.now()


    _dt.datetime = _SteppedDatetime
''')

DAEMON_CLOCK_SHIM = _STEPPED_TIME + textwrap.dedent('''
    from datetime import datetime as _datetime, timezone as _timezone

    import dagster._time as _dagster_time

    _dagster_time._mockable_get_current_datetime = lambda: _datetime.fromtimestamp(_time.time(), _timezone.utc)
''')
