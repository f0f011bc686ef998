"""P40, queue floor: where the pump's head query starts, as a pure rule."""

from __future__ import annotations

from msgx_engine.pipeline.grouping.queue_floor import QueueFloor


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_floor_follows_the_head_and_drops_to_its_start_every_recheck():
    """After a whole read the query starts at the head it found; a second later it reads the index
    whole again, so a row another process reopened below the head (a replay) is seen within it."""
    t = Ticks()
    floor = QueueFloor(recheck_s=1.0, monotonic=t)
    assert floor.start() == 0                 # the first read is whole
    floor.saw(500)
    t.now += 0.4
    assert floor.start() == 500
    floor.saw(None)                           # nothing open at or above 500: the floor stays
    t.now += 0.4
    assert floor.start() == 500
    t.now += 0.3
    assert floor.start() == 0                 # a second since the last whole read
    floor.saw(10)                             # a replayed row below the old head
    t.now += 0.1
    assert floor.start() == 10


def test_a_row_this_pump_registers_below_the_floor_is_read_by_the_next_query():
    """A late arrival or a gap's row the intake registers below the head lowers the floor at once:
    it is processed before any larger id, not a recheck later (INV-3)."""
    t = Ticks()
    floor = QueueFloor(recheck_s=1.0, monotonic=t)
    floor.start()
    floor.saw(900)
    floor.lower(850)
    t.now += 0.1
    assert floor.start() == 850
    floor.lower(950)                          # above the floor: nothing to lower
    assert floor.start() == 850
