"""CMINMSGS/COUTMSGS adapter: autocommit reads, inserts the way the AODB adapter does, and the
one write msgx makes to a production mailbox: ``CMINMSGS_DATE_PROCESSED`` where it is NULL."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, inspect, select, update

from msgx_engine.db import make_engine
from msgx_engine.mailbox.tables import cminmsgs, coutmsgs, mailbox_metadata

RECEIVED_STATUS = "VALID"


class MailboxError(RuntimeError):
    """The mailbox cannot be used as asked (wrong database, missing tables)."""


@dataclass(frozen=True)
class InboxRow:
    msg_id: int
    body: str
    received_at: datetime | None


def _now() -> datetime:
    return datetime.now().replace(microsecond=0)


class Mailbox:
    """One mailbox database. Reads run in autocommit so they never hold a snapshot open."""

    def __init__(self, url: str, engine: Engine | None = None) -> None:
        self.url = url
        self.engine = engine or make_engine(url, autocommit=True, pool_size=2)

    # --- schema (test and demo databases only) -------------------------------------------
    def init(self) -> None:
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
        with self.engine.connect() as conn:
            result = conn.execute(cminmsgs.insert().values(
                CMINMSGS_CLOB_MSG=body,
                CMINMSGS_DATE_RECEIVED=received_at or _now(),
                CMINMSGS_STATUS=RECEIVED_STATUS,
            ))
            return int(result.inserted_primary_key[0])

    def put_many(self, bodies: Iterable[str]) -> list[int]:
        return [self.put(b) for b in bodies]

    def unprocessed(self, after_id: int, limit: int) -> list[InboxRow]:
        """Unmarked rows with id > after_id in id order; bounded by primary key (DESIGN §2.1)."""
        q = (select(cminmsgs.c.CMINMSGS_ID, cminmsgs.c.CMINMSGS_CLOB_MSG, cminmsgs.c.CMINMSGS_DATE_RECEIVED)
             .where(cminmsgs.c.CMINMSGS_ID > after_id, cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_(None))
             .order_by(cminmsgs.c.CMINMSGS_ID).limit(limit))
        with self.engine.connect() as conn:
            return [InboxRow(int(r[0]), r[1], r[2]) for r in conn.execute(q)]

    def unprocessed_ids(self, after_id: int, limit: int) -> list[int]:
        q = (select(cminmsgs.c.CMINMSGS_ID)
             .where(cminmsgs.c.CMINMSGS_ID > after_id, cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_(None))
             .order_by(cminmsgs.c.CMINMSGS_ID).limit(limit))
        with self.engine.connect() as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def bodies(self, ids: Sequence[int]) -> dict[int, str]:
        if not ids:
            return {}
        q = select(cminmsgs.c.CMINMSGS_ID, cminmsgs.c.CMINMSGS_CLOB_MSG).where(cminmsgs.c.CMINMSGS_ID.in_(ids))
        with self.engine.connect() as conn:
            return {int(r[0]): r[1] for r in conn.execute(q)}

    def max_id(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.max(cminmsgs.c.CMINMSGS_ID), 0))).scalar_one())

    def mark_processed(self, msg_ids: Sequence[int], when: datetime | None = None) -> set[int]:
        """Write DATE_PROCESSED only where it is NULL (C-15). Returns the ids this call marked."""
        if not msg_ids:
            return set()
        when = when or _now()
        marked: set[int] = set()
        with self.engine.connect() as conn:
            for msg_id in msg_ids:
                res = conn.execute(update(cminmsgs)
                                   .where(cminmsgs.c.CMINMSGS_ID == msg_id,
                                          cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_(None))
                                   .values(CMINMSGS_DATE_PROCESSED=when))
                if res.rowcount:
                    marked.add(msg_id)
        return marked

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
        with self.engine.connect() as conn:
            result = conn.execute(coutmsgs.insert().values(
                COUTMSGS_CLOB_MSG=body, COUTMSGS_DATE_INSERTED=_now(), ROUTINGID=routing_id))
            return int(result.inserted_primary_key[0])

    def dispose(self) -> None:
        self.engine.dispose()
