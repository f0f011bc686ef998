"""The cut-over's decisions, pure: where the watermark lies and why a command is refused.

Every refusal is one paragraph in the operator's words: what does not hold, and what to do about it.
"""

from __future__ import annotations

from msgx_engine.store.cutover_state import PRODUCTION, SHADOW, CutoverState


def finished_high_water(lowest_open: int | None, accounted_for: int) -> int:
    """The highest mailbox id up to which this installation has finished everything: just below its
    queue head (the smallest registered id not finished), or everything it accounts for when nothing
    is open. Messages finish in id order, so nothing at or below it is left and nothing above is done
    (a late arrival below finished ones is the exception; ``stop_problems`` refuses it)."""
    return lowest_open - 1 if lowest_open is not None else accounted_for


def stop_refusal(*, shadow_mode: bool, state: CutoverState | None) -> str | None:
    """stop-writes runs on the installation that holds the right: production, not stopped already."""
    if shadow_mode:
        return ("this installation is a shadow (MSGX_MODE=shadow): it never holds the right to process and mark "
                "the mailbox, so there are no writes to stop. Run stop-writes with the active installation's "
                "configuration")
    if state is not None and state.role == SHADOW:
        return "this state database belongs to a shadow installation: it holds no right to process the mailbox"
    if state is not None and state.rolling_back:
        return (f"a rollback to this installation is in progress (audit {state.audit_id}): run the same "
                "`msgx cutover rollback` command again to finish it before anything else")
    if state is not None and state.stopped:
        return (f"writes are already stopped on this installation (at mailbox id {state.watermark}, audit "
                f"{state.audit_id}): it does not hold the right to give up. Promote the other installation, "
                "or roll back to this one")
    return None


def stop_problems(*, watermark: int, applied_open: int | None, finished_above: int, pending_marks: int,
                  waiting_events: int, kafka: bool, dead_events: int = 0, held_events: int = 0,
                  accepted_dead: int | None = None) -> list[str]:
    """What keeps this installation from handing over at ``watermark`` once its pump has stopped.
    Dead events (and the events of their flights held behind them) are nobody's to publish after the
    hand-over: the operator revives them first or accepts their loss by their number."""
    problems = []
    lost = dead_events + held_events
    if lost and accepted_dead != lost:
        seen = "" if accepted_dead is None else f" (--accept-dead {accepted_dead} was given; the number is now {lost})"
        problems.append(
            f"{lost} event(s) of messages up to id {watermark} would never be published{seen}: {dead_events} dead "
            f"(delivery gave up on them) and {held_events} held behind them on their flights. The installation "
            "taking over does not publish them. Revive them (`msgx outbox --apply --all-dead`) so that stop-writes "
            f"delivers them, or, to hand over without them, run stop-writes again with --accept-dead {lost}")
    if applied_open is not None:
        problems.append(f"mailbox id {applied_open} has changed flights but not finished (its Redis update waits): "
                        "bring Redis back, let the pump finish it, then stop writes again")
    if finished_above:
        problems.append(f"{finished_above} message(s) above mailbox id {watermark} are finished while id "
                        f"{watermark + 1} is still open (a late arrival, or a message waiting for a retry): let "
                        "the pump finish it (see `msgx status`), or close it with `msgx skip`, then stop writes again")
    if pending_marks:
        problems.append(f"{pending_marks} processed mailbox row(s) up to id {watermark} are not marked yet: the "
                        "mailbox must be reachable so every mark is written before the hand-over")
    if waiting_events:
        how = ("Kafka must be reachable so they are delivered before the hand-over (see `msgx outbox`)" if kafka
               else "Kafka is not configured (MSGX_KAFKA_BOOTSTRAP), so they cannot be delivered")
        problems.append(f"{waiting_events} event(s) of messages up to id {watermark} wait for delivery: {how}")
    return problems


def promote_refusal(*, shadow_mode: bool, own: CutoverState | None, own_history: str | None,
                    old: CutoverState | None) -> str | None:
    """promote runs on a shadow's state database with production's configuration, after the old
    installation stopped writes (read from its database)."""
    if shadow_mode:
        return ("promote runs with the configuration this installation has afterwards: MSGX_MODE=production (or "
                "unset), the production topics and Redis key, and the same state database it used as a shadow")
    if own is not None and own.role == PRODUCTION:
        return ("this state database is already a production installation's (promoted before, or stopped): only a "
                "shadow's state database can be promoted")
    if own_history is not None:
        return (f"this state database belongs to a production installation ({own_history}): only a shadow's state "
                "database can be promoted")
    if old is not None and old.rolling_back:
        return ("the old installation is in the middle of a rollback (its state database says so): finish the "
                "rollback there (run the same `msgx cutover rollback` again), then stop its writes again")
    if old is None or old.role != PRODUCTION or not old.stopped or old.watermark is None:
        return ("the old installation has not stopped writes (its state database records no stop): run "
                "`msgx cutover stop-writes` there first, and check that --from names its state database")
    return None


def behind_refusal(finished: int, watermark: int) -> str | None:
    if finished < watermark:
        return (f"this installation has finished the mailbox only up to id {finished}, behind the old "
                f"installation's watermark {watermark}: let its pump catch up (as a shadow), then promote again")
    return None


def rollback_refusal(*, shadow_mode: bool, own: CutoverState | None, other: CutoverState | None) -> str | None:
    """rollback runs on the installation that stopped writes, after the promoted one stopped too."""
    if shadow_mode:
        return "rollback runs with this installation's production configuration, not MSGX_MODE=shadow"
    if own is None or own.role != PRODUCTION or not own.stopped or own.watermark is None:
        return ("this installation has not stopped writes (no cut-over left it stopped): rollback brings back "
                "the installation that ran `msgx cutover stop-writes` before the other one was promoted")
    if other is None or other.role != PRODUCTION or other.took_over_at is None:
        return ("--from does not name a promoted installation's state database (it records no promote): give "
                "the state database of the installation that took over")
    if other.took_over_at != own.watermark:
        return (f"the installation named by --from took over at mailbox id {other.took_over_at}, not at this "
                f"installation's watermark {own.watermark}: it did not take over from this one")
    if not other.stopped or other.watermark is None:
        return ("the promoted installation has not stopped writes: run `msgx cutover stop-writes` there first, "
                "so that at no moment two installations hold the right to process the mailbox")
    return None


def resume_refusal(*, shadow_mode: bool, own: CutoverState | None) -> str | None:
    """resume reopens writes on the installation that stopped them, when the cut-over is called off."""
    if shadow_mode:
        return "resume runs with this installation's production configuration, not MSGX_MODE=shadow"
    if own is not None and own.rolling_back:
        return (f"a rollback to this installation is in progress (audit {own.audit_id}): run the same "
                "`msgx cutover rollback` command again to finish it; resume does not apply")
    if own is None or own.role != PRODUCTION or not own.stopped:
        return ("this installation has not stopped writes (no `msgx cutover stop-writes` left it stopped): there "
                "is nothing to resume")
    return None     # stopped without a watermark: a stop-writes that never finished, so nobody can have taken over


def taken_over_refusal(watermark: int, marked_after: int, first: int | None, last: int | None) -> str | None:
    """Marks after the watermark mean another installation took the right over (a promote) and
    processed rows since: reopening here would make two holders. Rollback is the way back then."""
    if not marked_after:
        return None
    return (f"{marked_after} mailbox row(s) after this installation's watermark {watermark} are marked as processed "
            f"(ids {first} to {last}): another installation took over and processed them. Do not resume: stop writes "
            "on that installation (`msgx cutover stop-writes`), then run `msgx cutover rollback --from URL` here")
