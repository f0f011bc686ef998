"""Alerting on health-check state changes (OPS-2): a failing check posts ONE alert
to the webhook (MSGX_ALERT_WEBHOOK, Slack-compatible JSON) across evaluations, and one more when it
recovers; the state lives in PostgreSQL (alert_state), so separate runs agree; a dead or hanging
webhook never raises and never holds up the pump."""

from __future__ import annotations

import logging
import threading

from sqlalchemy import text

from msgx_engine.monitor.alerts import Alerter
from msgx_engine.store.status import Status
from tests.builders import gtdt
from tests.http_support import make_dead_letter, webhook
from tests.pipeline_support import drain_now, proc
from tests.private_servers import free_port


def resolve_dead_letter(app, msg_id: int = 900) -> None:
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE proc_state SET status = 'SKIPPED', reason = 'operator' WHERE msg_id = :i"),
                     {"i": msg_id})


def alert_row(app, name: str):
    with app.engine.connect() as conn:
        return conn.execute(text("SELECT * FROM alert_state WHERE check_name = :n"), {"n": name}).one()


def test_a_failing_check_posts_once_per_state_change(app, caplog):
    """Dead letters appear -> one POST {"text": ...} and one ERROR line, however many
    evaluations follow; resolved -> one "recovered" POST; a healthy start posts nothing."""
    with webhook() as hook:
        alerter = Alerter(app.engine, webhook_url=hook.url, timeout_s=10)
        first = alerter.evaluate()
        assert first.changed == [] and hook.posts == []            # healthy from the start: no news
        make_dead_letter(app)
        with caplog.at_level(logging.ERROR, logger="msgx_engine.monitor.alerts"):
            assert alerter.evaluate().changed == ["dead_letters"]
            assert alerter.evaluate().changed == []
            Alerter(app.engine, webhook_url=hook.url).evaluate()   # another run: the state is in PostgreSQL
        errors = [r for r in caplog.records if r.levelno == logging.ERROR and "dead_letters" in r.getMessage()]
        assert len(errors) == 1 and "FAILING" in errors[0].getMessage()
        assert len(hook.posts) == 1 and set(hook.posts[0]) == {"text"}
        assert "dead_letters FAILING" in hook.texts()[0] and "1 dead letter" in hook.texts()[0]
        assert alert_row(app, "dead_letters").notified_failing is True
        resolve_dead_letter(app)
        alerter.evaluate()
        alerter.evaluate()
        assert len(hook.posts) == 2 and "dead_letters recovered" in hook.texts()[1]
        assert alert_row(app, "dead_letters").failing is False


def test_an_alert_missed_by_a_dead_webhook_is_sent_once_when_it_returns(app, caplog):
    """A closed port: evaluate() does not raise, logs the webhook failure without the secret path,
    records the error; when the webhook answers again the pending change is posted exactly once."""
    port = free_port()                   # nothing listens there
    make_dead_letter(app)
    alerter = Alerter(app.engine, webhook_url=f"http://127.0.0.1:{port}/services/T0/B0/secret-path", timeout_s=2)
    with caplog.at_level(logging.WARNING):
        result = alerter.evaluate()
    assert result.changed == ["dead_letters"] and result.announced == [] and result.announce_errors
    assert "secret-path" not in caplog.text and "127.0.0.1" in caplog.text
    row = alert_row(app, "dead_letters")
    assert row.failing is True and row.notified_failing is None and row.notify_error
    with webhook() as hook:
        alerter.webhook_url = hook.url
        alerter.evaluate()
        alerter.evaluate()
        assert len(hook.posts) == 1 and "dead_letters FAILING" in hook.texts()[0]


def test_a_hanging_webhook_does_not_stall_the_pump(app):
    """While an evaluation waits on a webhook that never answers, the pump processes
    messages to the end (the alerter holds no lock or transaction during the POST)."""
    make_dead_letter(app)
    with webhook(hang=True) as hook:
        alerter = Alerter(app.engine, webhook_url=hook.url, timeout_s=30)
        evaluation = threading.Thread(target=alerter.evaluate, daemon=True)
        evaluation.start()
        assert hook.arrived.wait(30), "the evaluation never reached the webhook"
        ids = [app.mailbox.put(gtdt(f"H{i}", (1, f"A{i}"))) for i in range(3)]
        drain_now(app)
        assert [proc(app, i).status for i in ids] == [Status.SUCCEEDED] * 3
        assert evaluation.is_alive()            # still waiting on the webhook meanwhile
        hook.release.set()
        evaluation.join(30)
        assert not evaluation.is_alive()
    assert alert_row(app, "dead_letters").notified_failing is True
