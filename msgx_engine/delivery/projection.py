"""The Redis projection ``flightInfo`` (D10, INV-23, INV-24): field FLID, value = whole-state JSON.

The hash's name is ``Settings.redis_key`` (``MSGX_REDIS_KEY``, default ``flightInfo``), and every
path (the post-commit write, rebuild, archiving's removal and purge, the drift check) is given it:
a shadow on production's Redis writes a hash of its own, never production's (OPS-3).

Written by a post-commit hook between transaction 1 and 2, so a message only becomes terminal
once its flights are projected; a Redis error raises and leaves the message non-terminal (it is
retried, its state is not applied twice). Deleted and code-share (MAID set) flights are removed.

Version guard: a companion hash ``<key>:version`` remembers the STATE_VERSION last applied to
each FLID, removals included; a Lua script writes a value only when its version is not older, so a
late or replayed write never overwrites a newer one and never resurrects a removed flight. Equal
versions are rewritten (an idempotent redo after a crash). A physical purge of a flight row (which
restarts its version) must also drop the FLID from the version hash, or run a rebuild.

``rebuild`` replaces both hashes from PostgreSQL atomically while holding the pipeline writer
lock, so no transaction 1 commits between the read and the swap. ``drift`` compares Redis with
PostgreSQL by version (and a random sample by document), re-checking the differences under the
same lock, and leaves out flights whose message is between transaction 1 and 2 (their projection
is legitimately pending).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

import redis
from sqlalchemy import Connection, Engine, select

from msgx_engine.config import DEFAULT_REDIS_KEY
from msgx_engine.state.model import FlightState
from msgx_engine.state.serialize import state_json
from msgx_engine.store import locks, queue_figures
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.tables import flight_schd, msg_event

log = logging.getLogger(__name__)

DEFAULT_KEY = DEFAULT_REDIS_KEY
REMOVE = ""  # value sentinel for "remove this field" (a JSON document is never empty)
CHUNK = 1000
DRIFT_DOCUMENTS = 2000    # whole documents the drift check compares each time, at random (O18, projection drift check)
# the flights the projection should hold, with their versions (projected(): live, no code-share child)
_CURRENT_VERSIONS = select(flight_schd.c.flid, flight_schd.c.state_version).where(
    flight_schd.c.deleted.is_(False), flight_schd.c.maid.is_(None))

# KEYS[1] = projection hash, KEYS[2] = version hash; ARGV = flid, version, value triples.
# Returns the number of writes refused because Redis already held a newer version.
_GUARDED_WRITE = """
local refused = 0
for i = 1, #ARGV, 3 do
  local flid, ver, val = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local cur = redis.call('HGET', KEYS[2], flid)
  if (not cur) or tonumber(cur) <= ver then
    if val == '' then redis.call('HDEL', KEYS[1], flid) else redis.call('HSET', KEYS[1], flid, val) end
    redis.call('HSET', KEYS[2], flid, ver)
  else
    refused = refused + 1
  end
end
return refused
"""


def projected(state: FlightState) -> bool:
    """Deleted and code-share flights are not in the projection (D10, D11, flight list source; INV-22)."""
    return not state.deleted and not state.fields.get("MAID")


def projection_value(state: FlightState) -> str:
    return state_json(state) if projected(state) else REMOVE


def connect(url: str, *, timeout_s: float = 2.0) -> redis.Redis:
    """Short timeouts: a dead Redis must fail the projection step quickly, not hang the pump."""
    return redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                                decode_responses=True)


@dataclass(frozen=True)
class Drift:
    pg_count: int
    redis_count: int
    missing: int            # in PostgreSQL's current set, absent from Redis
    extra: int              # in Redis, not current in PostgreSQL (deleted, code-share, unknown)
    differing: int          # present in both, different JSON
    pending: int            # touched by a message between transaction 1 and 2: not counted
    sample: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.missing + self.extra + self.differing

    def as_metadata(self) -> dict[str, int | str]:
        return {"pg_count": self.pg_count, "redis_count": self.redis_count, "missing": self.missing,
                "extra": self.extra, "differing": self.differing, "pending": self.pending,
                "drift_total": self.total, "sample_flids": ", ".join(self.sample)}


class Projection:
    def __init__(self, client: redis.Redis, key: str = DEFAULT_KEY) -> None:
        self.client = client
        self.key = key
        self.version_key = f"{key}:version"
        self._write = client.register_script(_GUARDED_WRITE)

    # --- incremental (post-commit) ------------------------------------------------------------
    def apply(self, states: Iterable[FlightState]) -> int:
        """Write or remove each flight under the version guard; returns how many were refused as stale."""
        refused = 0
        args: list[str | int] = []
        for s in states:
            args += [s.flid, s.state_version, projection_value(s)]
            if len(args) >= 3 * CHUNK:
                refused += int(self._write(keys=[self.key, self.version_key], args=args))
                args = []
        if args:
            refused += int(self._write(keys=[self.key, self.version_key], args=args))
        if refused:
            log.info("projection kept a newer version for %s flight(s)", refused)
        return refused

    @property
    def hook(self) -> ProjectionHook:
        """The post-commit hook (``Processor.post_commit``): raises on a Redis failure (INV-23)."""
        return ProjectionHook(self)

    def remove(self, versions: Sequence[tuple[str, int]]) -> int:
        """Remove flights deleted outside a message (archiving retires unowned rows), version-guarded."""
        args: list[str | int] = []
        for flid, version in versions:
            args += [flid, version, REMOVE]
        return int(self._write(keys=[self.key, self.version_key], args=args)) if args else 0

    def forget(self, flids: Sequence[str]) -> int:
        """Drop purged rows from both hashes: a FLID created again starts its versions anew."""
        removed = 0
        for chunk in _chunks(list(flids)):
            pipe = self.client.pipeline()
            pipe.hdel(self.key, *chunk)
            pipe.hdel(self.version_key, *chunk)
            removed += int(pipe.execute()[1])
        return removed

    def get(self, flid: str) -> str | None:
        return cast("str | None", self.client.hget(self.key, flid))

    # --- rebuild and drift ----------------------------------------------------------------------
    def rebuild(self, engine: Engine) -> int:
        """Replace the projection with PostgreSQL's current state; returns the number of flights."""
        tmp, tmp_ver = f"{self.key}:rebuild:{uuid.uuid4().hex}", f"{self.version_key}:rebuild:{uuid.uuid4().hex}"
        with engine.connect() as conn, conn.begin():
            locks.lock_writer_row(conn)
            states = FlightRepository(conn).load_all_current()
            versions = {r.flid: r.state_version for r in conn.execute(
                select(flight_schd.c.flid, flight_schd.c.state_version))}
            try:
                values = {s.flid: state_json(s) for s in states}
                for chunk in _chunks(list(values.items())):
                    self.client.hset(tmp, mapping=dict(chunk))
                for chunk in _chunks(list(versions.items())):
                    self.client.hset(tmp_ver, mapping=dict(chunk))
                pipe = self.client.pipeline(transaction=True)
                for src, dst, present in ((tmp, self.key, values), (tmp_ver, self.version_key, versions)):
                    if present:
                        pipe.rename(src, dst)
                    else:
                        pipe.delete(dst)
                pipe.execute()
            finally:
                self.client.delete(tmp, tmp_ver)
        log.info("projection %s rebuilt from PostgreSQL: %s flights", self.key, len(states))
        return len(states)

    def drift(self, engine: Engine, *, sample_size: int = 10, documents: int = DRIFT_DOCUMENTS) -> Drift:
        """Compare Redis with PostgreSQL's current flights (count and a sample of differing FLIDs).

        Two passes, because the health check runs every minute and the writer lock stops every
        message's transaction 1 while held: first without a lock (one REPEATABLE READ snapshot of
        PostgreSQL, then Redis), then only the flights that differed, again under the writer lock,
        so a write racing the first pass is not counted.

        The first pass compares versions, not documents (decision O18): every current flight's
        STATE_VERSION against the version hash the guarded write keeps beside the projection, and
        which flights the projection holds; whole documents only for ``documents`` flights picked
        at random (all of them in a smaller store). A lost or stale write always leaves an older
        version behind, and a document edited in Redis under its version is found by the sample
        in time. Reading and serialising every stored flight took a CPU core for most of each
        minute with a year of flights (400,000) stored, beside the pump; versions take a second."""
        with engine.connect() as conn:
            conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                versions = {flid: str(v) for flid, v in conn.execute(_CURRENT_VERSIONS)}
                picked = random.sample(list(versions), min(documents, len(versions)))
                documented = {f: state_json(st) for f, st in FlightRepository(conn).load(picked).items()}
        held = set(cast("list[str]", self.client.hkeys(self.key)))
        held_versions = cast("dict[str, str]", self.client.hgetall(self.version_key))
        stored = dict(zip(picked, self._values(picked), strict=True))
        pg_count, redis_count = len(versions), len(held)
        candidates = sorted((versions.keys() ^ held)
                            | {f for f in versions.keys() & held if held_versions.get(f) != versions[f]}
                            | {f for f, doc in documented.items() if stored.get(f) != doc})
        pending: set[str] = set()
        if candidates:
            with engine.connect() as conn, conn.begin():
                locks.lock_writer_row(conn)
                expected = {f: state_json(st) for f, st in FlightRepository(conn).load(candidates).items()
                            if projected(st)}
                pending = set(conn.execute(select(msg_event.c.flid).distinct().where(
                    msg_event.c.msg_id.in_(queue_figures.applied_open_ids()), msg_event.c.flid.in_(candidates)))
                    .scalars())
                values = self._values(candidates)
            actual = {f: v for f, v in zip(candidates, values, strict=True) if v is not None}
        else:
            expected, actual = {}, {}
        missing = {f for f in expected.keys() - actual.keys() if f not in pending}
        extra = {f for f in actual.keys() - expected.keys() if f not in pending}
        differing = {f for f in expected.keys() & actual.keys() if expected[f] != actual[f] and f not in pending}
        bad = sorted(missing | extra | differing)
        return Drift(pg_count=pg_count, redis_count=redis_count, missing=len(missing), extra=len(extra),
                     differing=len(differing), pending=len(pending), sample=bad[:sample_size])

    def _values(self, flids: list[str]) -> list[str | None]:
        """The projection's documents of ``flids`` in that order (None: absent), a chunk a round trip."""
        out: list[str | None] = []
        for chunk in _chunks(flids):
            out += cast("list[str | None]", self.client.hmget(self.key, chunk))
        return out


def _chunks(items: list, size: int = CHUNK) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


@dataclass(frozen=True)
class ProjectionHook:
    """The projection as a post-commit step: one message's states (``__call__``), or a committed
    group's in one guarded write, one round trip (``many``, P16, two-transaction write-behind). Each flight's last state
    in the group is the one written: an earlier one would only be overwritten by it."""

    projection: Projection

    def __call__(self, conn: Connection, msg_id: int, states: Sequence[FlightState]) -> None:
        self.projection.apply(states)

    def many(self, conn: Connection, group: Sequence[tuple[int, Sequence[FlightState]]]) -> None:
        self.projection.apply({st.flid: st for _, states in group for st in states}.values())


# said by the pump and projection_rebuild_job when no Redis is configured (Kafka has its own: runner.py)
REDIS_NOT_CONFIGURED = "MSGX_REDIS_URL is not configured: no Redis projection"


def post_commit_hooks(redis_url: str | None, *, key: str = DEFAULT_KEY) -> list:
    """The projection hook when Redis is configured; otherwise none, reported as not configured."""
    if not redis_url:
        log.info("%s: step skipped", REDIS_NOT_CONFIGURED)
        return []
    return [Projection(connect(redis_url), key).hook]
