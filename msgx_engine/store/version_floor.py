"""Versions and event ids that only grow on the production topics, whoever publishes (decision O19, version floor).

A consumer keeps, per flight, the highest ``event_id`` it took from ``msg`` and the highest
``STATE_VERSION`` from ``schd``, and drops what is not above (docs/delivery.md). Both numbers are
counted by a state database: the event id by the ``msg_event`` sequence, a flight's version by its
``flight_schd`` row. When another state database takes over publishing (``msgx cutover promote``,
``msgx cutover rollback``) or a database restored from an older backup goes on (``msgx recover``),
its counts may stand below what the consumers hold, and they would drop its changes. ``lift``
moves this database's counts above everything published elsewhere (``Published``) before it
publishes anything, without publishing a change of its own:

- every flight it stores gets ``state_version = max(own, published)``: no event, so the flight's
  next real change is published one above what the consumers hold;
- a flight it does not store gets a row in ``version_floor``: when a message first writes it here,
  its first version is one above the floor (``floors_of``; a flight created without a floor starts
  at 1 as always);
- the ``msg_event`` sequence continues above the highest event id published;
- events built here already and not published yet (a promoted shadow's rows after the watermark,
  ``republish_after``) are moved above as well: per flight, every such event's version by the same
  amount (the first one lands one above what was published, the order stays), their documents'
  ``STATE_VERSION`` with them, and their event ids renumbered above everything, in their order.

What was published elsewhere is read from the other installation's state database when the command
has it (``published_by``: every stored flight's version, the highest event id in the outbox and its
archive), and from the production topics when it has not (``pipeline/published.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import orjson
from sqlalchemy import Connection, Engine, any_, bindparam, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.types import BigInteger, Text

from msgx_engine.state.serialize import dumps
from msgx_engine.store.tables import flight_schd, msg_event, msg_event_archive, version_floor


@dataclass(frozen=True)
class Published:
    """The most another installation (or the topics) shows published: the highest event id, and
    per flight the highest STATE_VERSION."""

    event_id: int = 0
    versions: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        return f"event ids up to {self.event_id}, versions of {len(self.versions)} flight(s)"


@dataclass(frozen=True)
class Lifted:
    """What ``lift`` changed."""

    raised: int          # stored flights whose version was raised (no event)
    floors: int          # flights not stored here, given a floor
    shifted: int         # flights whose events still to publish were moved above
    renumbered: int      # events still to publish given new ids
    next_event_id: int   # the next event id this database hands out is above this

    def outcome(self) -> dict[str, int]:
        """For the audit row's outcome."""
        return {"raised": self.raised, "floors": self.floors, "shifted": self.shifted,
                "renumbered": self.renumbered, "next_event_id_above": self.next_event_id}

    def describe(self) -> str:
        moved = (f"; {self.renumbered} event(s) not yet published moved above it ({self.shifted} flight(s) "
                 "renumbered)" if self.renumbered else "")
        return (f"versions and event ids continue above what was published: {self.raised} flight version(s) "
                f"raised without an event, {self.floors} flight(s) stored only elsewhere given a floor, the next "
                f"event id above {self.next_event_id}{moved}")


def published_by(conn: Connection) -> Published:
    """What a state database published at most: every stored flight's version (its published
    versions never pass it), and the highest event id of its outbox and archive."""
    top = conn.execute(select(func.greatest(
        select(func.coalesce(func.max(msg_event.c.event_id), 0)).scalar_subquery(),
        select(func.coalesce(func.max(msg_event_archive.c.event_id), 0)).scalar_subquery()))).scalar_one()
    versions = {r.flid: int(r.state_version) for r in conn.execute(
        select(flight_schd.c.flid, flight_schd.c.state_version).where(flight_schd.c.state_version > 0))}
    return Published(int(top), versions)


def floors_of(conn: Connection, flids: Iterable[str]) -> dict[str, int]:
    """The floors of ``flids`` (flights with none are left out): one statement."""
    wanted = sorted(set(flids))
    if not wanted:
        return {}
    q = select(version_floor.c.flid, version_floor.c.state_version).where(
        version_floor.c.flid == any_(bindparam("flids", wanted, type_=ARRAY(Text))))
    return {r.flid: int(r.state_version) for r in conn.execute(q)}


def any_floor(engine: Engine) -> bool:
    """Whether any floor is stored; True when that cannot be read (the database unreachable or not
    migrated yet): the message path then asks per new flight, and the pump reports the cause."""
    try:
        with engine.connect() as conn:
            return bool(conn.execute(select(select(version_floor.c.flid).exists())).scalar_one())
    except SQLAlchemyError:
        return True


class Floors:
    """``floor(flid)`` for the message path: read only when a flight is first written here (its
    row is absent), so a flight that exists costs nothing."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __call__(self, flid: str) -> int:
        return floors_of(self.conn, [flid]).get(flid, 0)


_SEQ = "pg_get_serial_sequence('msg_event', 'event_id')"


def lift(conn: Connection, published: Published, *, republish_after: int | None = None) -> Lifted:
    """The module doc's moves, in the caller's transaction (it holds the writer row lock)."""
    conn.execute(text("CREATE TEMP TABLE published_version (flid text PRIMARY KEY, v bigint NOT NULL) "
                      "ON COMMIT DROP"))
    conn.execute(text("INSERT INTO published_version SELECT * FROM unnest(:flids, :vs)").bindparams(
        bindparam("flids", list(published.versions), type_=ARRAY(Text)),
        bindparam("vs", list(published.versions.values()), type_=ARRAY(BigInteger))))
    shifted = renumbered = 0
    if republish_after is not None:
        shifted = _shift_unpublished(conn, republish_after)
    raised = conn.execute(text(
        "UPDATE flight_schd f SET state_version = p.v FROM published_version p "
        "WHERE f.flid = p.flid AND f.state_version < p.v")).rowcount
    floors = conn.execute(text(
        "INSERT INTO version_floor (flid, state_version) SELECT p.flid, p.v FROM published_version p "
        "WHERE NOT EXISTS (SELECT 1 FROM flight_schd f WHERE f.flid = p.flid) "
        "ON CONFLICT (flid) DO UPDATE SET state_version = greatest(version_floor.state_version, "
        "EXCLUDED.state_version), updated_at = now()")).rowcount
    top = int(conn.execute(text(
        "SELECT greatest(:published, (SELECT coalesce(max(event_id), 0) FROM msg_event), "
        "(SELECT coalesce(max(event_id), 0) FROM msg_event_archive), "
        f"(SELECT last_value FROM pg_sequences WHERE schemaname || '.' || sequencename = {_SEQ}))"),
        {"published": published.event_id}).scalar_one() or 0)
    if republish_after is not None:
        renumbered = conn.execute(text(
            "UPDATE msg_event e SET event_id = :top + r.n FROM (SELECT event_id, row_number() OVER "
            "(ORDER BY event_id) AS n FROM msg_event WHERE msg_id > :after AND sent_at IS NULL) r "
            "WHERE e.event_id = r.event_id"), {"top": top, "after": republish_after}).rowcount
        top += renumbered
    if top > 0:
        conn.execute(text(f"SELECT setval({_SEQ}, :top)"), {"top": top})
    conn.execute(text("DROP TABLE published_version"))
    return Lifted(raised, floors, shifted, renumbered, top)


def _shift_unpublished(conn: Connection, after: int) -> int:
    """Per flight with events of rows after ``after`` still to publish: the amount that puts its
    first such event one above the published version; its stored version, its events' versions
    and their documents move by it. Returns the flights moved."""
    shifts: dict[str, int] = dict(conn.execute(text(
        "SELECT e.flid, p.v - (min(e.state_version) - 1) FROM msg_event e JOIN published_version p USING (flid) "
        "WHERE e.msg_id > :after AND e.sent_at IS NULL GROUP BY e.flid, p.v "
        "HAVING p.v > min(e.state_version) - 1"), {"after": after}).tuples().all())
    if not shifts:
        return 0
    flids = bindparam("flids", list(shifts), type_=ARRAY(Text))
    rows = conn.execute(text(
        "SELECT event_id, flid, state_version, payload FROM msg_event "
        "WHERE msg_id > :after AND sent_at IS NULL AND flid = ANY(:flids)").bindparams(flids),
        {"after": after}).all()
    moved = []
    for r in rows:
        version = int(r.state_version) + int(shifts[r.flid])
        doc = orjson.loads(r.payload)
        doc["STATE_VERSION"] = version
        moved.append({"id": r.event_id, "v": version, "p": dumps(doc)})
    conn.execute(text("UPDATE msg_event SET state_version = :v, payload = :p WHERE event_id = :id"), moved)
    conn.execute(text(
        "UPDATE flight_schd f SET state_version = f.state_version + s.d FROM unnest(:flids, :ds) AS s(flid, d) "
        "WHERE f.flid = s.flid").bindparams(flids, bindparam("ds", list(shifts.values()), type_=ARRAY(BigInteger))))
    return len(shifts)
