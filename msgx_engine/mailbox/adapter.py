"""CMINMSGS/COUTMSGS adapter: every statement msgx runs on the mailbox is here.

Autocommit reads (intake, body prefetch, recovery lookups), inserts the way the AODB adapter
does (``put``, and the requests msgx sends to COUTMSGS), and the one write msgx makes to a
production mailbox: ``CMINMSGS_DATE_PROCESSED`` where it is NULL (C-15). The tables are never
altered (C-14); ``init`` creates them only in a test or demo database.

A shadow instance (D29, shadow mode, ``MSGX_MODE=shadow``) opens the mailbox read-only: every write method
raises ``MailboxReadOnly`` before it reaches the server, and ``fresh_ids`` reads by id alone
(production's marks say nothing about what the shadow has processed, OPS-3 "input by watermark").

Bodies are read as bytes and decoded row by row: MariaDB stores some byte
sequences that are not UTF-8 (ED A0 80, an encoded surrogate) even in strict mode, and a driver
that decodes the whole result would fail every row of the batch, so the pump would take one bad
row for a mailbox outage. Here an undecodable byte stays in that row's text as a lone surrogate
(``surrogateescape``), which the decoder refuses as DEAD(malformed) with an ``encoding:`` detail;
the rows around it are untouched."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import CursorResult, Engine, LargeBinary, case, cast, func, inspect, select, update
from sqlalchemy.sql.elements import ColumnElement

from msgx_engine.config import ConfigError
from msgx_engine.db import make_engine, server_address
from msgx_engine.mailbox.tables import cminmsgs, coutmsgs, mailbox_metadata

RECEIVED_STATUS = "VALID"
# The AODB adapter fills the row's TYPE and SUBTYPE columns from the message's META; ``put`` does the
# same (a cheap look at the head, no parse), so a row whose body cannot be decoded still says what
# it is (``kinds``).
_META_FIELD = {name: re.compile(rf"<{name}>\s*([A-Za-z]{{3,4}})\s*</{name}>") for name in ("TYPE", "STYP")}
_HEAD_CHARS = 2048


def meta_kind(body: str) -> tuple[str | None, str | None]:
    """TYPE and STYP as the message's head states them (None where it does not, or not validly)."""
    head = body[:_HEAD_CHARS]
    found = [m.group(1).upper() if (m := _META_FIELD[name].search(head)) else None for name in ("TYPE", "STYP")]
    return found[0], found[1]


class MailboxError(RuntimeError):
    """The mailbox cannot be used as asked (wrong database, missing tables)."""


class MailboxReadOnly(MailboxError, ConfigError):
    """A write asked of a read-only (shadow) mailbox: refused before any statement runs (D29). A
    ConfigError too: the CLI answers it like any refused configuration (exit 2)."""


@dataclass(frozen=True)
class Marks:
    """What one ``mark_where_null`` did to each id."""

    marked: set[int]        # DATE_PROCESSED written now
    already: set[int]       # someone had marked it: left as it was (C-15)
    missing: set[int]       # no such row


@dataclass(frozen=True)
class MarkedRows:
    """Marked (processed) rows in an id range: how many, the first and the last."""

    count: int
    first: int | None
    last: int | None


def _new_id(result: CursorResult) -> int:
    """The auto-increment id an insert just got."""
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def body_text(raw: bytes | str | None) -> str | None:
    """One row's body as text: UTF-8 decoded with ``surrogateescape``, so bytes that are not UTF-8
    reach the decoder (and are refused there) instead of failing the read."""
    if raw is None or isinstance(raw, str):
        return raw
    return raw.decode("utf-8", "surrogateescape")


def _now() -> datetime:
    return datetime.now().replace(microsecond=0)


class Mailbox:
    """One mailbox database. Reads run in autocommit so they never hold a snapshot open."""

    def __init__(self, url: str, engine: Engine | None = None, *, read_only: bool = False) -> None:
        self.url = url
        self.engine = engine or make_engine(url, autocommit=True, pool_size=2)
        self.read_only = read_only

    @property
    def where(self) -> str:
        """The mailbox server as a log line names it: host and port, never the credentials."""
        return server_address(self.engine)

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise MailboxReadOnly(f"shadow mode (MSGX_MODE=shadow) never writes the mailbox: {what} refused")

    def _raw_body(self) -> ColumnElement:
        """The body column as the server's bytes on MySQL/MariaDB (``CAST(... AS BINARY)``). A
        PostgreSQL mailbox holds only valid text, and its text-to-bytea cast would read escapes."""
        column = cminmsgs.c.CMINMSGS_CLOB_MSG
        return cast(column, LargeBinary) if self.engine.dialect.name in ("mysql", "mariadb") else column

    # --- schema (test and demo databases only) -------------------------------------------
    def init(self) -> None:
        self._writable("creating the mailbox tables")
        existing = set(inspect(self.engine).get_table_names())
        ours = {"cminmsgs", "coutmsgs"}
        foreign = existing - ours
        if foreign:
            raise MailboxError(
                f"refusing to create mailbox tables: database already holds other tables "
                f"({', '.join(sorted(foreign)[:5])}); mailbox init is for test/demo databases only")
        mailbox_metadata.create_all(self.engine)

    def check_schema(self) -> None:
        names = set(inspect(self.engine).get_table_names())
        missing = {"cminmsgs", "coutmsgs"} - names
        if missing:
            raise MailboxError(f"mailbox at {self.engine.url!r} lacks table(s) {sorted(missing)}")

    # --- inbox ---------------------------------------------------------------------------
    def put(self, body: str, received_at: datetime | None = None) -> int:
        """Insert one message as the AODB adapter does (status VALID, received now)."""
        self._writable("inserting a CMINMSGS row")
        mtype, styp = meta_kind(body)
        with self.engine.connect() as conn:
            result = conn.execute(cminmsgs.insert().values(
                CMINMSGS_CLOB_MSG=body,
                CMINMSGS_DATE_RECEIVED=received_at or _now(),
                CMINMSGS_STATUS=RECEIVED_STATUS,
                CMINMSGS_SUBSYSTEM_TYPE=mtype,
                CMINMSGS_SUBSYSTEM_SUBTYPE=styp,
            ))
            return _new_id(result)

    def put_many(self, bodies: Iterable[str]) -> list[int]:
        return [self.put(b) for b in bodies]

    def fresh_ids(self, after_id: int, limit: int) -> list[int]:
        """Rows above ``after_id`` this installation may not have seen: the unmarked ones, or in a
        read-only (shadow) mailbox every row by id, whoever marked it (the watermark read, OPS-3)."""
        return self.ids_above(after_id, limit) if self.read_only else self.unprocessed_ids(after_id, limit)

    def unseen_rows(self, after_id: int, cap: int) -> tuple[int, datetime | None, int]:
        """The rows ``fresh_ids`` would return above ``after_id``, counted up to ``cap`` (a read
        bounded by primary key): (how many, the earliest CMINMSGS_DATE_RECEIVED among them, how
        many carry one). The monitor's measure of work the intake has not registered yet."""
        cid, received = cminmsgs.c.CMINMSGS_ID, cminmsgs.c.CMINMSGS_DATE_RECEIVED
        q = select(cid, received.label("received")).where(cid > after_id)
        if not self.read_only:
            q = q.where(cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_(None))
        rows = q.order_by(cid).limit(cap).subquery()
        with self.engine.connect() as conn:
            count, oldest, stamped = conn.execute(
                select(func.count(), func.min(rows.c.received), func.count(rows.c.received))).one()
        return int(count), oldest, int(stamped)

    def ids_above(self, after_id: int, limit: int) -> list[int]:
        q = (select(cminmsgs.c.CMINMSGS_ID).where(cminmsgs.c.CMINMSGS_ID > after_id)
             .order_by(cminmsgs.c.CMINMSGS_ID).limit(limit))
        with self.engine.connect() as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def unprocessed_ids_between(self, after_id: int, upto_id: int) -> list[int]:
        """Unmarked row ids with ``after_id < id <= upto_id``: bounded by primary key on both
        sides, so it reads that slice of the mailbox and no more (C-14: no index on the mark)."""
        cid = cminmsgs.c.CMINMSGS_ID
        q = (select(cid).where(cid > after_id, cid <= upto_id, cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_(None))
             .order_by(cid))
        with self.engine.connect() as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def unprocessed_ids(self, after_id: int, limit: int) -> list[int]:
        q = (select(cminmsgs.c.CMINMSGS_ID)
             .where(cminmsgs.c.CMINMSGS_ID > after_id, cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_(None))
             .order_by(cminmsgs.c.CMINMSGS_ID).limit(limit))
        with self.engine.connect() as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def marked_above(self, after_id: int, upto: int | None = None) -> MarkedRows:
        """Marked rows with ``after_id < id <= upto`` (no upper bound when ``upto`` is None). Bounded
        by primary key, so it reads only the rows above ``after_id`` (C-14: no index on the mark)."""
        cid, mark = cminmsgs.c.CMINMSGS_ID, cminmsgs.c.CMINMSGS_DATE_PROCESSED
        q = select(func.count(), func.min(cid), func.max(cid)).where(cid > after_id, mark.is_not(None))
        if upto is not None:
            q = q.where(cid <= upto)
        with self.engine.connect() as conn:
            count, first, last = conn.execute(q).one()
        return MarkedRows(int(count), None if first is None else int(first), None if last is None else int(last))

    def marked_ids_above(self, after_id: int, limit: int) -> list[int]:
        """Marked row ids above ``after_id`` in id order (``msgx recover`` pages through them)."""
        q = (select(cminmsgs.c.CMINMSGS_ID)
             .where(cminmsgs.c.CMINMSGS_ID > after_id, cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_not(None))
             .order_by(cminmsgs.c.CMINMSGS_ID).limit(limit))
        with self.engine.connect() as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def last_marked_id(self) -> int | None:
        """The largest marked id: read backwards by primary key, stopping at the first marked row."""
        q = (select(cminmsgs.c.CMINMSGS_ID).where(cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_not(None))
             .order_by(cminmsgs.c.CMINMSGS_ID.desc()).limit(1))
        with self.engine.connect() as conn:
            found = conn.execute(q).scalar()
        return None if found is None else int(found)

    def bodies(self, ids: Sequence[int], *, max_bytes: int | None = None) -> dict[int, str | None]:
        """Bodies of the rows that exist among ``ids``; with ``max_bytes`` a larger body comes back
        as None (read it alone with ``body`` when needed), so one prefetch stays bounded."""
        if not ids:
            return {}
        raw = self._raw_body()
        column = raw if max_bytes is None else case(
            (func.length(cminmsgs.c.CMINMSGS_CLOB_MSG) <= max_bytes, raw), else_=None)
        q = select(cminmsgs.c.CMINMSGS_ID, column).where(cminmsgs.c.CMINMSGS_ID.in_(list(ids)))
        with self.engine.connect() as conn:
            return {int(r[0]): body_text(r[1]) for r in conn.execute(q)}

    def kinds(self, ids: Sequence[int]) -> dict[int, tuple[str | None, str | None]]:
        """Each row's TYPE and SUBTYPE columns (what the AODB adapter says it sent), for messages
        whose body msgx could not decode. Rows that are gone are left out."""
        if not ids:
            return {}
        c = cminmsgs.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(c.CMINMSGS_ID, c.CMINMSGS_SUBSYSTEM_TYPE, c.CMINMSGS_SUBSYSTEM_SUBTYPE)
                                .where(c.CMINMSGS_ID.in_(list(ids))))
            return {int(r[0]): (r[1], r[2]) for r in rows}

    def body(self, msg_id: int) -> str | None:
        with self.engine.connect() as conn:
            return body_text(conn.execute(select(self._raw_body())
                                          .where(cminmsgs.c.CMINMSGS_ID == msg_id)).scalar())

    def mark_where_null(self, ids: Sequence[int], when: datetime) -> Marks:
        """Write DATE_PROCESSED for ``ids`` only where it is NULL (C-15, INV-7): two statements
        for the whole batch, not one per row."""
        self._writable("writing CMINMSGS_DATE_PROCESSED")
        mark = cminmsgs.c.CMINMSGS_DATE_PROCESSED
        with self.engine.connect() as conn:
            present = {int(r[0]): r[1] for r in conn.execute(
                select(cminmsgs.c.CMINMSGS_ID, mark).where(cminmsgs.c.CMINMSGS_ID.in_(list(ids))))}
            unmarked = [i for i, v in present.items() if v is None]
            if unmarked:
                conn.execute(update(cminmsgs).where(cminmsgs.c.CMINMSGS_ID.in_(unmarked), mark.is_(None))
                             .values({mark: when}))
        marked = set(unmarked)
        return Marks(marked, set(present) - marked, set(ids) - set(present))

    def processed_at(self, msg_ids: Sequence[int]) -> dict[int, datetime | None]:
        q = (select(cminmsgs.c.CMINMSGS_ID, cminmsgs.c.CMINMSGS_DATE_PROCESSED)
             .where(cminmsgs.c.CMINMSGS_ID.in_(list(msg_ids))))
        with self.engine.connect() as conn:
            return {int(r[0]): r[1] for r in conn.execute(q)}

    def exists(self, msg_ids: Sequence[int]) -> set[int]:
        q = select(cminmsgs.c.CMINMSGS_ID).where(cminmsgs.c.CMINMSGS_ID.in_(list(msg_ids)))
        with self.engine.connect() as conn:
            return {int(r[0]) for r in conn.execute(q)}

    # --- outbox to the AODB ----------------------------------------------------------------
    def send_request(self, body: str, routing_id: str) -> int:
        self._writable("inserting a COUTMSGS row")
        with self.engine.connect() as conn:
            result = conn.execute(coutmsgs.insert().values(
                COUTMSGS_CLOB_MSG=body, COUTMSGS_DATE_INSERTED=_now(), ROUTINGID=routing_id))
            return _new_id(result)

    def find_request(self, routing_id: str, *markers: str) -> int | None:
        """The newest COUTMSGS row of ``routing_id`` whose body contains every marker (the
        request tracker's recovery lookup by SEQN and subtype)."""
        body = coutmsgs.c.COUTMSGS_CLOB_MSG
        q = (select(coutmsgs.c.COUTMSGS_ID)
             .where(coutmsgs.c.ROUTINGID == routing_id, *(body.contains(m) for m in markers))
             .order_by(coutmsgs.c.COUTMSGS_ID.desc()).limit(1))
        with self.engine.connect() as conn:
            found = conn.execute(q).scalar()
        return int(found) if found is not None else None

    def requests_after(self, after_id: int, routing_ids: Sequence[str], limit: int
                       ) -> tuple[int, list[tuple[int, str]]]:
        """The largest COUTMSGS id (at least ``after_id``), and the newest ``limit`` rows of
        ``routing_ids`` above ``after_id`` up to it, oldest first, as (id, body): the requests any
        installation sent, which every installation matches answers against (decision L16, verdicts from the mailbox).
        Bounded by primary key; a read a shadow may make too."""
        cid = coutmsgs.c.COUTMSGS_ID
        with self.engine.connect() as conn:
            top = max(int(conn.execute(select(func.coalesce(func.max(cid), 0))).scalar_one()), after_id)
            if top == after_id:
                return top, []
            q = (select(cid, coutmsgs.c.COUTMSGS_CLOB_MSG)
                 .where(cid > after_id, cid <= top, coutmsgs.c.ROUTINGID.in_(list(routing_ids)))
                 .order_by(cid.desc()).limit(limit))
            return top, sorted((int(r[0]), r[1] or "") for r in conn.execute(q))

    def dispose(self) -> None:
        self.engine.dispose()
