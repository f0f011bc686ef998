"""The pure transitions of the message path: given what was read, what comes next.

Nothing here touches a connection, a clock or a cache: the message path (``protocol.py``) reads
and writes, and asks these functions what a decision does to the flights, which verdict a refused
or duplicate message gets, and how long a head waits. They are the parts a reader checks against
the specification, so they stand apart from the transaction handling around them.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from msgx_engine.handlers import codeshare
from msgx_engine.handlers.changes import next_state
from msgx_engine.pipeline import routing
from msgx_engine.pipeline.outcomes import ErrorClass, Terminal, Wait
from msgx_engine.pipeline.policy import RetryPolicy
from msgx_engine.redact import safe_text
from msgx_engine.sis.content_hash import same_content
from msgx_engine.sis.decode import Meta, SisMessage, SisRefused
from msgx_engine.state.bridges import STAND_KEYS, BridgeMap, derive, needs_derivation, stands_of
from msgx_engine.state.model import FlightState
from msgx_engine.state.serialize import document_changes
from msgx_engine.store import identity, outbox
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.queue import QueueHead, Status

log = logging.getLogger(__name__)


def next_states(routed: routing.Routed, msg_id: int, meta: Meta, bridges: Callable[[], BridgeMap | None] = lambda: None,
                *, replayed: bool = False, floor: Callable[[str], int] = lambda flid: 0
                ) -> tuple[list[FlightState], list[OutboxRow], list[FlightState]]:
    """The decision's flight changes applied to the loaded states, last writer wins by ``msg_id``
    (F6): the states to write, their outbox events, and the states a reader sees change (for the
    projection). A change a reader does not see (every write equal or stale, or a deleted flight
    that stays deleted) is a silent write: stamps and hidden fields only, same version, no events;
    one that moves nothing at all is not written. A state whose stands changed (or that is new or
    restored) gets its airbridges derived (D27, stand to airbridge) from ``bridges()``, called at most once and only
    then: most messages never read the mapping. A message an operator replayed (``replayed``, US-10
    AC4: a stale replay is forced on purpose) lands on top of newer writes. A flight shown for the
    first time here starts above ``floor(flid)``, the version another installation published for it
    (decision O19, version floor); ``floor`` is asked only then."""
    current = dict(routed.flights)
    states: list[FlightState] = []
    events: list[OutboxRow] = []
    shown: list[FlightState] = []
    for change in routed.decision.changes:
        before = current.get(change.flid)
        result = next_state(change, before, msg_id, override=replayed)
        if result is None:
            continue
        base = before or FlightState.new(change.flid)
        state = result.state
        if not result.visible(base):
            if (state.fields, state.stamps, state.deleted) == (base.fields, base.stamps, base.deleted):
                continue
            state = replace(state, state_version=base.state_version, last_message_id=base.last_message_id)
            current[change.flid] = state
            states.append(state)
            continue
        if base.state_version == 0:     # first shown here: above what was published elsewhere (O19)
            state = replace(state, state_version=max(state.state_version, floor(change.flid) + 1))
        changed, cleared = result.changed, result.cleared
        rederived = needs_derivation(before, state)
        if rederived:
            state = derive(state, bridges() if stands_of(state) else None)
        if rederived or changed & STAND_KEYS:     # the derived keys may have moved with them
            derived, gone = document_changes(base, state)
            changed, cleared = changed | derived, cleared | gone
        current[change.flid] = state
        states.append(state)
        shown.append(state)
        own = outbox.change_events(msg_id, meta, state, changed, cleared)
        if codeshare.announced_by_master(before, state, current):   # decision C4, child changes reach the master: its
                                                                    # master's msg tells it
            own = [e for e in own if e.topic != outbox.TOPIC_MSG]
        events += own
    return states, events, shown


# --- verdicts: how a message ends without being applied -----------------------------------------
def ignored_by(rules: tuple[str, ...], meta: Meta) -> str | None:
    """US-04: case-insensitive TYPE-STYP / TYPE-* rules, checked before identity binding."""
    key = meta.type_styp.upper()
    for rule in rules:
        if fnmatch.fnmatchcase(key, rule.upper()):
            return rule
    return None


def dead(refused: SisRefused) -> Terminal:
    """DEAD as the decoder refused the body: never bound, nothing of it written."""
    return Terminal(Status.DEAD, refused.reason, refused.detail, ErrorClass.MALFORMED)


def tree_refused(msg: SisMessage) -> Terminal | None:
    """DEAD when the tree checks decode left to the helper (P32, tree checks in the helper) refuse ``msg``, made here:
    on the paths that end a message without writing it, which the helper's verdict is not worth a wait."""
    refused = msg.refusal(here=True)
    return dead(refused) if refused is not None else None


def identity_clash(msg_id: int, msg: SisMessage, other: identity.Binding) -> Terminal:
    """Same SNDR|TYPE|STYP|SEQN already bound to another row (INV-9): same content is a
    duplicate, other content a conflict; neither has any business effect. The stored hash and
    the newer one may be of either kind (P28, second-kind content hash: by body size, and bindings from before P28 hold
    the first kind); ``same_content`` hashes the newer body in the stored one's kind."""
    if same_content(other.payload_hash, msg.payload_hash, msg.root):
        return Terminal(Status.SKIPPED, "duplicate", msg=msg, bind=False, dup_of=other.msg_id)
    log.error("ALERT identity conflict: %s of mailbox id %s already bound to id %s with other content",
              msg.meta.identity, msg_id, other.msg_id)
    return Terminal(Status.SKIPPED, "identity_conflict",
                    f"{msg.meta.identity} bound to mailbox id {other.msg_id} with other content",
                    msg=msg, bind=False, dup_of=other.msg_id)


# --- waits: open, no attempt used (D22, projection failure; D24, vanished mailbox row) --------------
def projection_wait(head: QueueHead, exc: Exception, now: datetime, policy: RetryPolicy) -> Wait:
    """The post-commit projection failed (D22, projection failure, INV-23, INV-17b): transaction 1 stands, the
    message stays open and retries, backoff doubling from when it was applied and capped at
    30 s, for as long as it takes; one alert when the wait passes 60 s. Never DEAD."""
    applied = head.applied_at or now
    waited = (now - applied).total_seconds()
    before = (head.updated_at - applied).total_seconds() if head.applied_at and head.updated_at else 0.0
    detail = f"{type(exc).__name__}: {exc}"[:2000]
    log.warning("mailbox id %s waits for its projection (%.0f s so far): %s", head.msg_id, waited,
                safe_text(detail))
    alert = None
    if waited >= policy.wait_alert_s > before:
        alert = (f"mailbox id {head.msg_id} has waited {waited:.0f} s for the Redis projection; the queue "
                 f"behind it waits too ({detail})")
    return Wait(ErrorClass.PROJECTION, detail, policy.wait_delay(waited), alert)


def vanished(head: QueueHead, policy: RetryPolicy) -> Wait:
    """The registered mailbox row is gone (C-12, D24, vanished mailbox row): not the message's verdict, so it stays
    open at the head, uses no attempt, is looked for again every 30 s, and is resolved by an
    operator (an audited skip or replay). The alert fires when it is first found missing."""
    first = head.error_class != ErrorClass.SOURCE_MISSING
    detail = "the mailbox row vanished before processing; an operator resolves it (msgx skip / msgx replay)"
    alert = f"mailbox id {head.msg_id}: {detail}; the queue behind it waits" if first else None
    return Wait(ErrorClass.SOURCE_MISSING, detail, policy.wait_cap_s, alert)
