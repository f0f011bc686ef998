"""Archiving and purging: the only physical removal of history from msgx's PostgreSQL (US-11,
INV-25, FS §3.6/§7, D2, soft delete; D31, FLOP for an unknown FLID). Owner of
``proc_state_archive``, ``proc_state_hst_archive`` and ``msg_event_archive``; every statement here
runs inside a batch transaction of ``operations.archive``.

A message may be archived when it is terminal, was registered before the cutoff, owes no mailbox
mark (no PENDING backfill todo) and every one of its events was delivered (``sent_at`` set; a
dead-lettered event is undelivered and keeps its message), and it does not wait for an operator:
an unacknowledged DEAD or SKIPPED(unsupported) message (``tables.ATTENTION_WHERE``) stays, whatever
its age, with its history and events, until it is replayed, skipped or acknowledged. Its
``proc_state`` row (with the mark's outcome), its history and its events are copied column
for column and then deleted; the copies are ``ON CONFLICT DO NOTHING``, so a batch redone after a
crash converges. The mailbox ids stay
in ``proc_state_archive``, where intake looks them up (``store.registration.registered_among``).

Flights: an unowned row (FDAY NULL, D31, FLOP for an unknown FLID) not updated since the purge cutoff is retired like a
delete (D2, soft delete: ``deleted``, ``state_version + 1``, a released tombstone event under the housekeeping
mailbox id 0), a code-share master together with its live children and only when they are idle
and unowned too, so no live child is left pointing at a retired master (decision L5, master kept for a live child); a
soft-deleted flight whose delete is older than the purge cutoff and whose events were all
delivered is removed with its detail rows. Ledgers (``schd_gen``, ``schd_gen_flid``,
``schd_gen_run``) of days before the ledger cutoff are removed day by day; a live day's ledger
is never touched, so its diff-delete keeps both its member list and its flights' FDAY.
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Connection, Table, text

from msgx_engine.store import outbox
from msgx_engine.store.status import TERMINAL, TodoStatus, sql_in
from msgx_engine.store.tables import (
    ATTENTION_WHERE,
    detail_tables,
    msg_event,
    msg_event_archive,
    proc_state,
    proc_state_hst,
    proc_state_hst_archive,
)

HOUSEKEEPING_MSG_ID = 0     # msg_event.msg_id of the tombstones archiving writes (no mailbox message)

_TERMINAL_SQL = sql_in(TERMINAL)


def _cols(table: Table) -> str:
    return ", ".join(c.name for c in table.columns)


# --- messages --------------------------------------------------------------------------------------
# What waits for an operator (unacknowledged DEAD and SKIPPED(unsupported)) is kept whatever its age:
# archived, it would be out of replay's reach and out of the dead-letter count with its business
# effect lost. ``IS NOT TRUE``: a NULL reason must not make the test unknown and keep a row by accident.
_KEPT = f"({ATTENTION_WHERE})"
_ARCHIVABLE = (
    f"p.status IN {_TERMINAL_SQL} AND p.created_at < :cutoff AND {_KEPT} IS NOT TRUE "
    "AND NOT EXISTS (SELECT 1 FROM backfill_todo t WHERE t.msg_id = p.msg_id "
    f"AND t.status = '{TodoStatus.PENDING}') "
    "AND NOT EXISTS (SELECT 1 FROM msg_event e WHERE e.msg_id = p.msg_id AND e.sent_at IS NULL)")


def archivable_ids(conn: Connection, cutoff: datetime, after: int, limit: int) -> list[int]:
    """The next batch of archivable messages above id ``after``, row-locked ``SKIP LOCKED`` (a
    replay holding a row keeps it out of this batch)."""
    rows = conn.execute(text(f"SELECT p.msg_id FROM proc_state p WHERE p.msg_id > :after AND {_ARCHIVABLE} "
                             "ORDER BY p.msg_id LIMIT :limit FOR UPDATE OF p SKIP LOCKED"),
                        {"cutoff": cutoff, "after": after, "limit": limit})
    return [r[0] for r in rows]


def count_archivable(conn: Connection, cutoff: datetime) -> dict[str, int]:
    """What archiving the messages would move (a dry run)."""
    row = conn.execute(text(
        f"WITH a AS (SELECT p.msg_id FROM proc_state p WHERE {_ARCHIVABLE}) SELECT "
        "(SELECT count(*) FROM a), "
        "(SELECT count(*) FROM proc_state_hst h WHERE h.msg_id IN (SELECT msg_id FROM a)), "
        "(SELECT count(*) FROM msg_event e WHERE e.msg_id IN (SELECT msg_id FROM a)), "
        "(SELECT count(*) FROM backfill_todo t WHERE t.msg_id IN (SELECT msg_id FROM a))"),
        {"cutoff": cutoff}).one()
    return {"proc_state": row[0], "proc_state_hst": row[1], "msg_event": row[2], "backfill_todo": row[3]}


def count_kept(conn: Connection, cutoff: datetime) -> dict[str, int]:
    """Messages old enough to archive that are kept because they wait for an operator, by why:
    ``dead`` (DEAD, not acknowledged) and ``unsupported`` (SKIPPED(unsupported), not acknowledged).
    One statement over the partial index ``proc_state_attention_idx``."""
    rows = conn.execute(text(f"SELECT p.status, count(*) FROM proc_state p WHERE {ATTENTION_WHERE} "
                             "AND p.created_at < :cutoff GROUP BY p.status"), {"cutoff": cutoff})
    by_status = {r[0]: int(r[1]) for r in rows}
    return {"dead": by_status.get("DEAD", 0), "unsupported": by_status.get("SKIPPED", 0)}


def count_held(conn: Connection, cutoff: datetime, retention_cutoff: datetime) -> dict[str, int]:
    """Terminal messages past the retention that archiving leaves where they are, by what holds each
    (a dry run says why its numbers are small): ``identity_window`` (registered before the retention
    but inside the identity window, so their binding may still dedupe), ``undelivered`` (an event
    not yet delivered to Kafka), ``mark_owed`` (a mailbox mark still to write). One statement; the
    waiting dead letters are ``count_kept``'s."""
    row = conn.execute(text(
        f"SELECT count(*) FILTER (WHERE p.created_at >= :cutoff), "
        f"count(*) FILTER (WHERE p.created_at < :cutoff AND EXISTS (SELECT 1 FROM msg_event e "
        "WHERE e.msg_id = p.msg_id AND e.sent_at IS NULL)), "
        f"count(*) FILTER (WHERE p.created_at < :cutoff AND EXISTS (SELECT 1 FROM backfill_todo t "
        f"WHERE t.msg_id = p.msg_id AND t.status = '{TodoStatus.PENDING}')) "
        f"FROM proc_state p WHERE p.status IN {_TERMINAL_SQL} AND p.created_at < :retention "
        f"AND {_KEPT} IS NOT TRUE"), {"cutoff": cutoff, "retention": retention_cutoff}).one()
    return {"identity_window": int(row[0]), "undelivered": int(row[1]), "mark_owed": int(row[2])}


_PS_COPY = (
    f"INSERT INTO proc_state_archive ({_cols(proc_state)}, mark_status, marked_at, archived_at) "
    f"SELECT {', '.join('p.' + c.name for c in proc_state.columns)}, t.status, t.done_at, :now "
    "FROM proc_state p LEFT JOIN backfill_todo t ON t.msg_id = p.msg_id WHERE p.msg_id = ANY(:ids) "
    "ON CONFLICT (msg_id) DO NOTHING")
_HST_COPY = (f"INSERT INTO proc_state_hst_archive ({_cols(proc_state_hst_archive)}) "
             f"SELECT {_cols(proc_state_hst)} FROM proc_state_hst WHERE msg_id = ANY(:ids) "
             "ON CONFLICT (id) DO NOTHING")
_EVENT_COPY = (f"INSERT INTO msg_event_archive ({_cols(msg_event_archive)}) "
               f"SELECT {_cols(msg_event)} FROM msg_event WHERE msg_id = ANY(:ids) "
               "ON CONFLICT (event_id) DO NOTHING")


def move_messages(conn: Connection, ids: list[int], now: datetime) -> dict[str, int]:
    """Copy the messages, their history and events into the archive and delete the originals
    (only rows still terminal). Returns rows removed per online table."""
    params = {"ids": ids, "now": now}
    conn.execute(text(_PS_COPY), params)
    conn.execute(text(_HST_COPY), params)
    conn.execute(text(_EVENT_COPY), params)
    counts = {
        "msg_event": conn.execute(text("DELETE FROM msg_event WHERE msg_id = ANY(:ids)"), params).rowcount,
        "proc_state_hst": conn.execute(text("DELETE FROM proc_state_hst WHERE msg_id = ANY(:ids)"),
                                       params).rowcount,
        "backfill_todo": conn.execute(text("DELETE FROM backfill_todo WHERE msg_id = ANY(:ids)"),
                                      params).rowcount,
        "proc_state": conn.execute(text(f"DELETE FROM proc_state WHERE msg_id = ANY(:ids) "
                                        f"AND status IN {_TERMINAL_SQL}"), params).rowcount}
    return counts


def move_housekeeping_events(conn: Connection, cutoff: datetime) -> int:
    """The delivered tombstones archiving itself wrote (mailbox id 0), once past the cutoff."""
    params = {"cutoff": cutoff, "hk": HOUSEKEEPING_MSG_ID}
    where = "msg_id = :hk AND sent_at IS NOT NULL AND created_at < :cutoff"
    conn.execute(text(f"INSERT INTO msg_event_archive ({_cols(msg_event_archive)}) SELECT {_cols(msg_event)} "
                      f"FROM msg_event WHERE {where} ON CONFLICT (event_id) DO NOTHING"), params)
    return conn.execute(text(f"DELETE FROM msg_event WHERE {where}"), params).rowcount


# --- flights -------------------------------------------------------------------------------------------
def _idle_unowned(row: str) -> str:
    """A live flight no day owns (D31), not updated since the purge cutoff."""
    return (f"{row}.fday IS NULL AND NOT {row}.deleted AND {row}.updated_at < :cutoff "
            f"AND {row}.flid NOT IN (SELECT flid FROM schd_gen_flid)")


# What archiving retires, one unit at a time (decision L5, INV-21: never a live code-share child of a
# deleted master): a flight that is no child, together with its live children, when it and every one
# of them are idle and unowned (a child that must stay keeps its master live); and a child whose
# master is not live (missing or deleted), which no master's MAFL lists.
_UNOWNED = (f"{_idle_unowned('f')} AND ("
            "(f.maid IS NULL AND NOT EXISTS (SELECT 1 FROM flight_schd c WHERE c.maid = f.flid AND NOT c.deleted "
            f"AND NOT ({_idle_unowned('c')}))) "
            "OR (f.maid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM flight_schd m WHERE m.flid = f.maid "
            "AND NOT m.deleted)))")
_WITH_CHILDREN = ("flid IN (SELECT flid FROM picked) "
                  "OR (NOT deleted AND maid IN (SELECT flid FROM picked WHERE maid IS NULL))")
_PURGEABLE = ("f.deleted AND f.deleted_at < :cutoff "
              "AND f.flid NOT IN (SELECT flid FROM msg_event WHERE sent_at IS NULL)")


def count_flights(conn: Connection, cutoff: datetime) -> dict[str, int]:
    row = conn.execute(text(f"WITH picked AS (SELECT f.flid, f.maid FROM flight_schd f WHERE {_UNOWNED}) "
                            f"SELECT (SELECT count(*) FROM flight_schd WHERE {_WITH_CHILDREN}), "
                            f"(SELECT count(*) FROM flight_schd f WHERE {_PURGEABLE})"), {"cutoff": cutoff}).one()
    return {"flight_schd retired": row[0], "flight_schd purged": row[1]}


def retire_unowned(conn: Connection, cutoff: datetime, now: datetime, limit: int) -> list[tuple[str, int]]:
    """Soft-delete up to ``limit`` unowned rows idle since ``cutoff`` (D31), a master with its live
    children (all idle and unowned, or it is not picked: decision L5), each with a released
    tombstone; returns (FLID, new state_version). The caller holds the writer row lock."""
    rows = conn.execute(text(
        f"WITH picked AS (SELECT f.flid, f.maid FROM flight_schd f WHERE {_UNOWNED} ORDER BY f.flid "
        "LIMIT :limit FOR UPDATE SKIP LOCKED) "
        "UPDATE flight_schd SET deleted = true, deleted_at = :now, updated_at = :now, "
        f"state_version = state_version + 1 WHERE {_WITH_CHILDREN} "
        "RETURNING flid, state_version"), {"cutoff": cutoff, "now": now, "limit": limit}).fetchall()
    retired = sorted((r[0], int(r[1])) for r in rows)
    outbox.insert(conn, [outbox.tombstone_event(HOUSEKEEPING_MSG_ID, flid, v) for flid, v in retired])
    conn.execute(text("UPDATE msg_event SET released_at = :now WHERE msg_id = :hk AND released_at IS NULL"),
                 {"now": now, "hk": HOUSEKEEPING_MSG_ID})
    return retired


def purge_deleted(conn: Connection, cutoff: datetime, limit: int) -> tuple[list[str], dict[str, int]]:
    """Remove up to ``limit`` soft-deleted flights (row and details) whose delete is older than
    ``cutoff`` and whose events were all delivered. Returns the FLIDs and rows per table."""
    flids = [r[0] for r in conn.execute(text(
        f"SELECT f.flid FROM flight_schd f WHERE {_PURGEABLE} ORDER BY f.flid LIMIT :limit "
        "FOR UPDATE SKIP LOCKED"), {"cutoff": cutoff, "limit": limit})]
    counts: dict[str, int] = {}
    if not flids:
        return [], counts
    for name in detail_tables:
        counts[name] = conn.execute(text(f"DELETE FROM {name} WHERE flid = ANY(:f)"), {"f": flids}).rowcount
    counts["flight_schd purged"] = conn.execute(
        text("DELETE FROM flight_schd WHERE flid = ANY(:f) AND deleted"), {"f": flids}).rowcount
    return flids, counts


# --- snapshot ledgers -----------------------------------------------------------------------------------
def ledger_days_before(conn: Connection, day: date) -> list[date]:
    return [r[0] for r in conn.execute(text(
        "SELECT fday FROM schd_gen WHERE fday < :d UNION SELECT DISTINCT fday FROM schd_gen_flid WHERE fday < :d "
        "UNION SELECT DISTINCT fday FROM schd_gen_run WHERE fday < :d ORDER BY 1"), {"d": day})]


def count_ledgers(conn: Connection, day: date) -> dict[str, int]:
    return {t: int(conn.execute(text(f"SELECT count(*) FROM {t} WHERE fday < :d"), {"d": day}).scalar_one())
            for t in ("schd_gen", "schd_gen_flid", "schd_gen_run")}


def purge_ledger_day(conn: Connection, day: date) -> dict[str, int]:
    """One old day's ledger, member list and snapshot runs."""
    return {t: conn.execute(text(f"DELETE FROM {t} WHERE fday = :d"), {"d": day}).rowcount
            for t in ("schd_gen_flid", "schd_gen", "schd_gen_run")}
