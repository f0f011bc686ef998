"""Identity bindings (INV-9, US-03 AC3, D26, identity window): ``msg_identity``, its statements and its window.

A message's business identity ``SNDR|TYPE|STYP|SEQN`` is bound to the first mailbox row that
carries it, but only **within a window** (D26, identity window, default 24 h, ``MSGX_IDENTITY_WINDOW``) measured on
registration times (``proc_state.created_at``, the database clock): the AODB's SEQN wraps at
999999 and the samples reuse SEQN 1243, so after the window the same identity is a new message.

One row per identity, keyed by the SHA-256 of its text (a fixed 64-character key, so no identity
can overflow the btree index however long its SNDR or SEQN); the readable text stays beside it for
display. Binding is optimistic and costs no round trip of its own: ``binding_cte`` is a
data-modifying CTE that the guarded status statements of ``store.queue`` carry, an
``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` that takes the row over only when it is this
message's own (a retry) or its registration lies a window before ours. When it takes nothing,
the statement reports the clash and the caller rolls back and classifies it (duplicate or
conflict) with ``bound_elsewhere``.

Archiving must keep every binding whose registration lies inside the window (``purge_expired``
removes only the others); this module owns the table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, func, select

from msgx_engine.store.tables import msg_identity

DEFAULT_WINDOW = timedelta(hours=24)


class IdentityTaken(RuntimeError):
    """A guarded write could not bind the identity: another row holds it inside the window. The
    write's transaction must be rolled back; ``bound_elsewhere`` then says by whom."""


@dataclass(frozen=True)
class Binding:
    """Another message bound to the same identity inside the window."""

    msg_id: int
    payload_hash: str | None


def identity_hash(identity: str) -> str:
    """The fixed-size key of an identity: SHA-256 of its UTF-8 text, hex."""
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()


def binding_params(identity: str, payload_hash: str | None, window: timedelta) -> dict[str, object]:
    """The parameters ``binding_cte`` reads."""
    return {"b_hash": identity_hash(identity), "b_identity": identity, "b_payload_hash": payload_hash,
            "b_window": window}


def binding_cte(source: str, *, per_row: bool = False) -> str:
    """``b AS (...)``: bind the identity to the row ``source`` returns (``msg_id``, ``created_at``),
    taking an existing binding over only when it is that row's own or was registered at least a
    window earlier. ``b`` returns one row when bound, none when another row holds the identity.
    ``per_row``: each row of ``source`` brings its own ``b_hash``, ``b_identity`` and
    ``b_payload_hash`` columns (a group's statement, P13, write-behind) instead of the ``binding_params``."""
    values = ("b_hash, b_identity, msg_id, b_payload_hash" if per_row
              else "%(b_hash)s, %(b_identity)s, msg_id, %(b_payload_hash)s")
    return (
        "b AS (INSERT INTO msg_identity (identity_hash, identity, msg_id, payload_hash, registered_at, bound_at) "
        f"SELECT {values}, created_at, %(now)s::timestamptz "
        f"FROM {source} ON CONFLICT (identity_hash) DO UPDATE SET identity = EXCLUDED.identity, "
        "msg_id = EXCLUDED.msg_id, payload_hash = EXCLUDED.payload_hash, registered_at = EXCLUDED.registered_at, "
        "bound_at = EXCLUDED.bound_at WHERE msg_identity.msg_id = EXCLUDED.msg_id "
        "OR msg_identity.registered_at <= EXCLUDED.registered_at - %(b_window)s::interval RETURNING 1)")


_BOUND_SQL = ("SELECT msg_id, payload_hash FROM msg_identity WHERE identity_hash = %(hash)s "
              "AND msg_id <> %(msg_id)s AND registered_at > %(registered_at)s - %(window)s::interval")


def bound_elsewhere(conn: Connection, identity: str, msg_id: int, registered_at: datetime,
                    window: timedelta) -> Binding | None:
    """The other message this identity is bound to inside the window of a message registered at
    ``registered_at``, or None (never bound, or only longer ago than the window: a new message)."""
    row = conn.exec_driver_sql(_BOUND_SQL, {"hash": identity_hash(identity), "msg_id": msg_id,
                                            "registered_at": registered_at, "window": window}).first()
    return Binding(row.msg_id, row.payload_hash) if row is not None else None


def purge_expired(conn: Connection, before: datetime, limit: int | None = None) -> int:
    """Remove bindings registered before ``before`` (which must lie at least a window before the
    registration of every message still to be processed: a binding inside the window still
    dedupes), at most ``limit`` of them, so archiving takes them in short batches. For archiving."""
    expired = msg_identity.c.registered_at < before
    if limit is None:
        return conn.execute(delete(msg_identity).where(expired)).rowcount
    batch = select(msg_identity.c.identity_hash).where(expired).limit(limit).scalar_subquery()
    return conn.execute(delete(msg_identity).where(msg_identity.c.identity_hash.in_(batch))).rowcount


def count_expired(conn: Connection, before: datetime) -> int:
    """How many bindings ``purge_expired`` would remove (archiving's dry run)."""
    return conn.execute(select(func.count()).where(msg_identity.c.registered_at < before)).scalar_one()
