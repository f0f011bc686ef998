"""Outbox events derived from a committed state (FS §5.5, D12/D13).

``msg``: one change notification per flight and message. ``schd``: the flight's whole state (or a
tombstone for a deleted flight). Both are written in transaction 1, released in transaction 2.
"""

from __future__ import annotations

from collections.abc import Iterable

from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState
from msgx_engine.state.serialize import dumps, plain, state_json, tombstone_json

TOPIC_MSG = "msg"
TOPIC_SCHD = "schd"


def change_payload(msg_id: int, msg: SisMessage, state: FlightState, changed: Iterable[str],
                   cleared: Iterable[str]) -> str:
    changes: dict[str, object] = {}
    for key in sorted(set(changed) | set(cleared)):
        value = state.fields.get(key)
        changes[key] = None if value is None else plain(value)
    doc = {"CHANGES": changes, "DELETED": state.deleted, "FLID": state.flid, "MSG_ID": msg_id,
           "SEQN": msg.meta.seqn, "SNDR": msg.meta.sndr, "STATE_VERSION": state.state_version,
           "STYP": msg.meta.styp, "TYPE": msg.meta.type}
    return dumps(doc)


def build_events(msg_id: int, msg: SisMessage, state: FlightState, changed: Iterable[str],
                 cleared: Iterable[str]) -> list[dict]:
    changed, cleared = list(changed), list(cleared)
    schd_kind, schd_payload = (("tombstone", tombstone_json(state.flid, state.state_version))
                               if state.deleted else ("state", state_json(state)))
    return [
        {"msg_id": msg_id, "flid": state.flid, "topic": TOPIC_MSG, "kind": "change",
         "state_version": state.state_version,
         "payload": change_payload(msg_id, msg, state, changed, cleared)},
        {"msg_id": msg_id, "flid": state.flid, "topic": TOPIC_SCHD, "kind": schd_kind,
         "state_version": state.state_version, "payload": schd_payload},
    ]
