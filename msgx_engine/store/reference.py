"""Reference data storage: ``ref_master`` written in transaction 1 (D17, reference categories, INV-26/27, D16, request
lifecycle).

``write_reference`` writes a pure ``RefPlan`` with one statement per kind of write, never one round
trip per record:

- DNLD/RESP: one DELETE of the category's rows whose key is not in the package, then one bulk
  upsert of every record (a RESP's request completion is its own plan, ``store.requests``). All
  in the caller's transaction, so a failure anywhere leaves the category's old rows whole (INV-27);
- ADD/UPD: one bulk upsert;
- DEL: one DELETE by key (a missing key deletes nothing: the row is already gone).

``batch_id`` is the mailbox id of the message that last wrote the row, ``source`` its SNDR. A
full package also records the category in ``ref_load`` (loaded whole, by which message, when).
No outbox events here: the one category flights derive from (ABDG, D27, stand to airbridge) comes wrapped in its own
plan, ``BridgeRefresh``, whose writer (``store.bridges``) calls this one between reading the
mapping before and after.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import ARRAY, Connection, Text, all_, any_, bindparam, delete
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.handlers.reference import RefPlan
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.tables import ref_load, ref_master

log = logging.getLogger(__name__)

_KEYS = bindparam("keys", type_=ARRAY(Text))
_UPSERT = pg_insert(ref_master)
_UPSERT = _UPSERT.on_conflict_do_update(
    constraint="ref_master_pkey",
    set_={"fields": _UPSERT.excluded.fields, "source": _UPSERT.excluded.source,
          "batch_id": _UPSERT.excluded.batch_id, "refreshed_at": _UPSERT.excluded.refreshed_at})


def write_reference(conn: Connection, p: RefPlan, msg_id: int, now: datetime) -> list[OutboxRow]:
    """Transaction-1 write of an accepted reference message (no outbox events)."""
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
    if p.replaces:
        loaded = pg_insert(ref_load).values(rtype=p.rtype, msg_id=msg_id, loaded_at=now)
        conn.execute(loaded.on_conflict_do_update(index_elements=["rtype"],
                                                  set_={"msg_id": msg_id, "loaded_at": now}))
    if p.records:
        conn.execute(_UPSERT, [{"rtype": p.rtype, "rkey": key, "fields": fields, "source": p.source,
                                "batch_id": msg_id, "refreshed_at": now} for key, fields in p.records])
    log.info("mailbox id %s %s/%s: %d record(s) written, %d removed", msg_id, p.rtype, p.styp,
             len(p.records), removed)
    return []
