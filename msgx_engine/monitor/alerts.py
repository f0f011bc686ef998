"""Alerting on state changes: one alert when a check starts failing, one when it recovers, and one
more each time a failing count of dead letters or dead events rises.

``Alerter.evaluate`` reads the figures, runs every check, and in one short transaction compares
each result with ``alert_state`` (migration 0013) and stores it. A change is logged at ERROR
(failing) or WARNING (recovered) right there, once. Announcing it on the optional webhook
(``MSGX_ALERT_WEBHOOK``: a JSON POST with a Slack-compatible body ``{"text": ...}``) happens after
the commit, outside any transaction, with a short timeout; the announced state is stored separately,
so a webhook that was down is tried again by the next evaluation and a change is announced once
when it comes back, never once per minute. After the first failed POST of an evaluation the rest
wait for the next one: a dead webhook costs one timeout per minute, not one per check.

A failing check that counts what an operator must handle (``CheckResult.rising``: dead letters,
dead outbox events) alerts again whenever its count is higher than at the previous evaluation,
naming the new ids: logged at ERROR at once and posted to the webhook once, retried like a state
change when the webhook is down (the rise waits in ``alert_state.notified_detail``). A count that
stays or falls raises nothing.

The evaluation never runs in the pump, so a dead or slow webhook cannot hold up processing.

Each evaluation also folds its reading of the dead-letter backlog and the oldest undelivered
event's wait into the current hour's worst (``store.parallel_run.fold_reading``), in the same
transaction: the parallel run's hourly record and the observation after a cut-over then hold the
worst of every hour, not what one comparison happened to sample.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.monitor.checks import CheckResult, Drift, Rising, evaluate
from msgx_engine.monitor.figures import Figures, figures
from msgx_engine.redact import safe_text, url_for_log
from msgx_engine.store import monitoring, parallel_run

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 3.0

DriftProbe = Callable[[], "Drift | None"]


class WebhookError(RuntimeError):
    """The webhook did not accept the alert (unreachable, timeout, non-2xx)."""


def post_webhook(url: str, text: str, *, timeout_s: float = WEBHOOK_TIMEOUT_S) -> None:
    """POST ``{"text": text}`` as JSON (Slack's incoming-webhook body; most chat tools accept it)."""
    body = json.dumps({"text": text}).encode("utf-8")
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "msgx-alerts"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:   # noqa: S310 (operator-configured URL)
            resp.read(1024)
    except urllib.error.HTTPError as exc:
        raise WebhookError(f"HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:    # URLError, timeouts, refused connections, a malformed URL
        raise WebhookError(f"{exc.__class__.__name__}: {safe_text(getattr(exc, 'reason', exc))}") from None


def alert_text(result: CheckResult, *, mode: str, failing: bool) -> str:
    state = "FAILING" if failing else "recovered"
    return f"[msgx {mode}] {result.name} {state}: {result.summary}"


NAMED_IDS = 20      # a rise's text names at most this many new ids


def rise_text(result: CheckResult, tally: monitoring.Tally, *, mode: str) -> str:
    """The alert for a rise: from how many to how many, the new ids, then the check's summary."""
    rising = result.rising
    assert rising is not None
    new = ", ".join(str(i) for i in tally.new[:NAMED_IDS])
    more = f" and {len(tally.new) - NAMED_IDS} more" if len(tally.new) > NAMED_IDS else ""
    named = f"; new: {rising.id_label} {new}{more}" if new else ""
    return (f"[msgx {mode}] {result.name} FAILING, rising: {rising.noun} rose from {tally.rose_from} to "
            f"{rising.count}{named}. {result.summary}")


def next_tally(rising: Rising, before: monitoring.Tally | None) -> monitoring.Tally:
    """The tally after this evaluation of a failing counting check. ``before``: the tally of the
    previous evaluation while it was failing (None: it has just started failing). A rise is a
    count higher than then; the new ids are those not seen then; an unposted rise stays pending."""
    if before is None:
        return monitoring.Tally(rising.count, rising.ids)
    if rising.count <= before.count:
        return monitoring.Tally(rising.count, rising.ids, before.pending, before.new, before.rose_from)
    seen = set(before.ids)
    new = tuple(i for i in rising.ids if i not in seen)
    if before.pending:
        return monitoring.Tally(rising.count, rising.ids, True, tuple(sorted(set(before.new) | set(new))),
                                before.rose_from)
    return monitoring.Tally(rising.count, rising.ids, True, new, before.count)


@dataclass
class Evaluation:
    results: list[CheckResult]
    changed: list[str] = field(default_factory=list)      # checks whose state changed in this evaluation
    rose: list[str] = field(default_factory=list)         # failing counts that rose in this evaluation
    announced: list[str] = field(default_factory=list)    # announcements the webhook accepted
    announce_errors: list[str] = field(default_factory=list)
    figures: Figures | None = None

    @property
    def failing(self) -> list[str]:
        return [r.name for r in self.results if not r.passed]


class Alerter:
    def __init__(self, engine: Engine, *, webhook_url: str | None, mode: str = "production",
                 drift_probe: DriftProbe | None = None, timeout_s: float = WEBHOOK_TIMEOUT_S,
                 mailbox: Mailbox | None = None, kafka_configured: bool = True) -> None:
        self.engine = engine
        self.mailbox = mailbox
        self.kafka_configured = kafka_configured       # False: delivery_backlog reports "not configured"
        self.webhook_url = webhook_url
        self.mode = mode
        self.drift_probe = drift_probe
        self.timeout_s = timeout_s

    def _drift(self) -> Drift | None:
        if self.drift_probe is None:
            return None
        try:
            return self.drift_probe()
        except Exception as exc:  # noqa: BLE001 - an unreachable Redis is drift we cannot rule out
            log.warning("projection drift not measured: %s", safe_text(exc))
            return Drift(total=0, error=safe_text(exc))

    def evaluate(self) -> Evaluation:
        f = replace(figures(self.engine, self.mailbox), kafka_configured=self.kafka_configured)
        results = evaluate(f, self._drift())
        evaluation = Evaluation(results, figures=f)
        by_name = {r.name: r for r in results}
        with self.engine.begin() as conn:
            parallel_run.fold_reading(conn, f.now, dlq=f.dead, dwell_s=f.unsent_age_s)
            states = monitoring.alert_states(conn, for_update=True)
            for r in results:
                before = states.get(r.name)
                failing = not r.passed
                # first sight of a passing check is no news; first sight of a failing one is
                changed = (before.failing != failing) if before is not None else failing
                monitoring.record_evaluation(conn, r.name, failing=failing, at=f.now, summary=r.summary,
                                             value=r.value, changed=changed or before is None)
                if changed:
                    evaluation.changed.append(r.name)
                    if failing:
                        log.error("ALERT %s", alert_text(r, mode=self.mode, failing=True))
                    else:
                        log.warning("alert cleared: %s", alert_text(r, mode=self.mode, failing=False))
                if r.rising is not None:
                    self._tally(conn, r, before, failing, evaluation)
            states = monitoring.alert_states(conn)
        self._announce(evaluation, states, by_name)
        return evaluation

    def _tally(self, conn: Connection, r: CheckResult, before: monitoring.AlertState | None, failing: bool,
               evaluation: Evaluation) -> None:
        """Store a counting check's tally; a rise is logged at ERROR here, once."""
        assert r.rising is not None
        if not failing:
            if before is not None and before.notified_detail is not None:
                monitoring.record_tally(conn, r.name, None)
            return
        previous = before.tally if before is not None and before.failing else None
        tally = next_tally(r.rising, previous)
        if previous is not None and r.rising.count > previous.count:
            evaluation.rose.append(r.name)
            log.error("ALERT %s", rise_text(r, tally, mode=self.mode))
        monitoring.record_tally(conn, r.name, tally)

    def _announce(self, evaluation: Evaluation, states: dict[str, monitoring.AlertState],
                  by_name: dict[str, CheckResult]) -> None:
        if not self.webhook_url:
            return
        # never announced and passing: nothing happened worth a message; a failing count that rose
        # since its last announcement is announced again
        due = [s for s in states.values() if s.check_name in by_name and (
            (not s.announced and (s.failing or s.notified_failing is not None)) or self._rise_due(s))]
        for state in due:
            result = by_name[state.check_name]
            tally = state.tally if state.failing else None
            rise = tally if tally is not None and tally.pending else None
            if rise is not None:       # a rise not yet posted (maybe with the state change itself)
                text = rise_text(result, rise, mode=self.mode)
            else:
                text = alert_text(result, mode=self.mode, failing=state.failing)
            try:
                post_webhook(self.webhook_url, text, timeout_s=self.timeout_s)
            except WebhookError as exc:
                log.error("alert webhook %s did not accept the %s alert (%s); retried at the next evaluation",
                          url_for_log(self.webhook_url), state.check_name, exc)
                evaluation.announce_errors.append(f"{state.check_name}: {exc}")
                self._note_error(state.check_name, str(exc))
                return
            with self.engine.begin() as conn:
                marked = state.announced or monitoring.mark_announced(conn, state.check_name, state.failing,
                                                                      state.evaluated_at)
                if rise is not None:
                    marked = monitoring.mark_rise_announced(conn, state.check_name, rise) and marked
                if marked:
                    evaluation.announced.append(state.check_name)

    @staticmethod
    def _rise_due(state: monitoring.AlertState) -> bool:
        tally = state.tally
        return state.failing and state.announced and tally is not None and tally.pending

    def _note_error(self, name: str, error: str) -> None:
        try:
            with self.engine.begin() as conn:
                monitoring.note_announce_error(conn, name, error)
        except SQLAlchemyError as exc:
            log.warning("could not record the webhook failure: %s", exc.__class__.__name__)
