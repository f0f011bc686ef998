"""The cyclic garbage collector paused while the pump works through one large message (
decision P20, GC pause).

A 10,000-flight snapshot builds a few hundred thousand small objects in seconds (an entry per
group element, frozen whole states, rows, documents). CPython starts a collection every 700 net
allocations and, every so often, one of the oldest generation, which walks every tracked object
the process holds: with it paused a snapshot took 2.16-2.31 s instead of 2.53-2.85 s (docs/snapshots.md).
Nothing the pump builds for a message needs the collector to be freed: its objects go by
reference counting when the message is done, and any cycle among them waits for the next
collection after ``resume``, which is also when the ordinary rhythm returns.

Only the pump's own thread pauses and resumes, around one message at a time, and a collector
someone else had turned off stays off.

Freeing those objects is work too: 0.08-0.15 s of a 1.4-1.6 s new day (P30, large objects freed late), when the pump's
steps let go of the package's tree, its records and its new states. It used to run as
``_attempt`` returned, before the message's terminal status was written; the pump now ``hold``s
a large message's objects and frees them in ``resume``, once the message (or its group) has
committed, so the terminal commit, its events and the mark no longer wait for it. At most one
large message's objects are held: the next large message frees the last one's before it starts.
"""

from __future__ import annotations

import gc

LARGE_BODY_CHARS = 1_000_000     # a body this long or longer (a daily schedule of ~1,000 flights and up)

_paused = False
_frozen = False
_large = False                   # the message being processed has a large body: ``hold`` keeps its objects
_held: list[object] = []


def pause_for(body_chars: int) -> None:
    """Pause the collector for a message whose body has ``body_chars`` characters, if it is large."""
    global _paused, _large
    _large = body_chars >= LARGE_BODY_CHARS     # a small message after a large one in its group holds nothing
    if not _large:
        return
    _held.clear()                # a large message before it, still in an open group: its objects go now
    if gc.isenabled():
        gc.disable()
        _paused = True


def hold(*objects: object) -> None:
    """Keep a large message's objects alive until ``resume``, so that freeing them does not
    delay its commit; a no-op for other messages, whose objects are cheap to free."""
    if _large:
        _held.extend(objects)


def resume() -> None:
    """The collector as it was before ``pause_for``, and the held objects freed (called when the
    message is done and committed, whatever its end)."""
    global _paused, _large
    _large = False
    _held.clear()
    if _paused:
        _paused = False
        gc.enable()


def holding() -> int:
    """How many objects are held (tests)."""
    return len(_held)


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
