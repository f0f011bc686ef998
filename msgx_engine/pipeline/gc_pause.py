"""The cyclic garbage collector paused while the pump works through one large message (issue 16,
decision P20).

A 10,000-flight snapshot builds a few hundred thousand small objects in seconds (an entry per
group element, frozen whole states, rows, documents). CPython starts a collection every 700 net
allocations and, every so often, one of the oldest generation, which walks every tracked object
the process holds: with it paused a snapshot took 2.16-2.31 s instead of 2.53-2.85 s (docs/snapshots.md).
Nothing the pump builds for a message needs the collector to be freed: its objects go by
reference counting when the message is done, and any cycle among them waits for the next
collection after ``resume``, which is also when the ordinary rhythm returns.

Only the pump's own thread pauses and resumes, around one message at a time, and a collector
someone else had turned off stays off.
"""

from __future__ import annotations

import gc

LARGE_BODY_CHARS = 1_000_000     # a body this long or longer (a daily schedule of ~1,000 flights and up)

_paused = False


def pause_for(body_chars: int) -> None:
    """Pause the collector for a message whose body has ``body_chars`` characters, if it is large."""
    global _paused
    if body_chars >= LARGE_BODY_CHARS and gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """The collector as it was before ``pause_for`` (called when the message is done, whatever its end)."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()


def paused() -> bool:
    return _paused
