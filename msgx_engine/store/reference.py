"""Reference data storage: ``ref_master`` written in transaction 1 (D17, INV-26/27, D16).

``load_reference`` reads, under the writer lock, the open RQRD a RESP may answer. ``ReferenceWrite``
applies a pure ``RefPlan`` with one statement per kind of write, never one round trip per record:

- DNLD/RESP: one DELETE of the category's rows whose key is not in the package, then one bulk
  upsert of every record; a RESP also sets its request DONE. All in the caller's transaction, so
  a failure anywhere leaves the category's old rows whole (INV-27);
- ADD/UPD: one bulk upsert;
- DEL: one DELETE by key (a missing key deletes nothing: the row is already gone).

``batch_id`` is the mailbox id of the message that last wrote the row, ``source`` its SNDR. No
outbox events: reference data touches no flight, and no consumer subscribes to it yet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ARRAY, Connection, Text, all_, any_, bindparam, delete
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.handlers.reference import REQUEST, RefPlan
from msgx_engine.sis.decode import SisMessage
from msgx_engine.store.ledger import complete_request, open_request
from msgx_engine.store.tables import ref_master

log = logging.getLogger(__name__)

_KEYS = bindparam("keys", type_=ARRAY(Text))
_UPSERT = pg_insert(ref_master)
_UPSERT = _UPSERT.on_conflict_do_update(
    constraint="ref_master_pkey",
    set_={"fields": _UPSERT.excluded.fields, "source": _UPSERT.excluded.source,
          "batch_id": _UPSERT.excluded.batch_id, "refreshed_at": _UPSERT.excluded.refreshed_at})


def load_reference(conn: Connection, msg: SisMessage) -> dict[str, object]:
    """A RESP's open RQRD for its type (D16); other subtypes need nothing from the store."""
    if msg.meta.styp != "RESP":
        return {}
    return {REQUEST: open_request(conn, "RQRD", msg.meta.type)}


@dataclass(frozen=True)
class ReferenceWrite:
    """Transaction-1 effect of an accepted reference message."""

    plan: RefPlan

    def apply(self, conn: Connection, msg_id: int, now: datetime) -> list[dict]:
        p = self.plan
        if p.recs_note:
            log.warning("mailbox id %s %s/%s: %s", msg_id, p.rtype, p.styp, p.recs_note)
        removed = 0
        if p.replaces:
            removed = conn.execute(delete(ref_master).where(ref_master.c.rtype == p.rtype,
                                                            ref_master.c.rkey != all_(_KEYS)),
                                   {"keys": [k for k, _ in p.records]}).rowcount
        elif p.keys:
            removed = conn.execute(delete(ref_master).where(ref_master.c.rtype == p.rtype,
                                                            ref_master.c.rkey == any_(_KEYS)),
                                   {"keys": list(p.keys)}).rowcount
        if p.records:
            conn.execute(_UPSERT, [{"rtype": p.rtype, "rkey": key, "fields": fields, "source": p.source,
                                    "batch_id": msg_id, "refreshed_at": now} for key, fields in p.records])
        if p.request is not None:
            complete_request(conn, p.request.req_id, msg_id, now)
        log.info("mailbox id %s %s/%s: %d record(s) written, %d removed", msg_id, p.rtype, p.styp,
                 len(p.records), removed)
        return []
