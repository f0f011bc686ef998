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
_frozen = False


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


def freeze_start_up() -> None:
    """Leave what the process holds when its first pump starts (modules, classes, the engine and
    its metadata: about 110,000 tracked objects) out of every later collection (``gc.freeze``),
    once per process. Those objects live as long as the process, yet a collection of the oldest
    generation walked them all: 50-58 ms, and the first allocation after a paused snapshot set one
    off. A cycle that was already garbage at that moment is never collected: a one-off, bounded
    by what start-up left behind."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def paused() -> bool:
    return _paused
