"""Re-alerting on a rising count (OPS-2): while dead_letters fails, each evaluation whose count of
unacknowledged dead letters is higher than at the previous one alerts again, naming the new mailbox
ids (ERROR log and the webhook, once per rise, retried after a webhook failure); a count that stays
or falls raises nothing. The same for dead outbox events in delivery_backlog. A loopback webhook."""

from __future__ import annotations

import logging

from sqlalchemy import text

from msgx_engine.monitor.alerts import Alerter
from tests.http_support import make_dead_letter, webhook
from tests.private_servers import free_port


def acknowledge(app, *ids: int) -> None:
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE proc_state SET acknowledged_at = now() WHERE msg_id = ANY(:ids)"),
                     {"ids": list(ids)})


def dead_event(app, msg_id: int) -> int:
    with app.engine.begin() as conn:
        return conn.execute(text(
            "INSERT INTO msg_event (msg_id, flid, topic, kind, state_version, payload, released_at, send_attempts, "
            "dead_at) VALUES (:m, 'F1', 'msg', 'change', 1, '{}', now(), 30, now()) RETURNING event_id"),
            {"m": msg_id}).scalar_one()


def rises(caplog, check: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.ERROR and f"{check} FAILING, rising" in r.getMessage()]


def test_a_rising_dead_letter_count_alerts_again_naming_the_new_ids(app, caplog):
    with webhook() as hook, caplog.at_level(logging.ERROR, logger="msgx_engine.monitor.alerts"):
        alerter = Alerter(app.engine, webhook_url=hook.url, timeout_s=10)
        make_dead_letter(app, 900)
        assert alerter.evaluate().changed == ["dead_letters"]
        assert len(hook.posts) == 1 and "dead_letters FAILING: 1 dead letter(s)" in hook.texts()[0]
        make_dead_letter(app, 901)
        make_dead_letter(app, 902)
        ev = alerter.evaluate()
        assert ev.rose == ["dead_letters"] and ev.changed == [] and ev.announced == ["dead_letters"]
        assert len(hook.posts) == 2
        assert "dead_letters FAILING, rising: dead letter(s) rose from 1 to 3; new: mailbox id 901, 902." \
            in hook.texts()[1]
        logged = rises(caplog, "dead_letters")
        assert len(logged) == 1 and "new: mailbox id 901, 902" in logged[0]
        alerter.evaluate()                              # the same count: nothing
        acknowledge(app, 901)
        assert alerter.evaluate().rose == []            # it fell: nothing
        assert len(hook.posts) == 2
        make_dead_letter(app, 903)                      # 2 -> 3: a rise again, naming only the new one
        alerter.evaluate()
        assert len(hook.posts) == 3 and "rose from 2 to 3; new: mailbox id 903." in hook.texts()[2]
        assert len(rises(caplog, "dead_letters")) == 2
        acknowledge(app, 900, 902, 903)
        alerter.evaluate()
        assert len(hook.posts) == 4 and "dead_letters recovered" in hook.texts()[3]
        make_dead_letter(app, 904)                      # failing anew: a state change, not a rise
        alerter.evaluate()
        assert len(hook.posts) == 5 and "dead_letters FAILING: 1 dead letter(s)" in hook.texts()[4]
        assert len(rises(caplog, "dead_letters")) == 2


def test_a_rise_missed_by_a_dead_webhook_is_posted_once_when_it_returns(app, caplog):
    make_dead_letter(app, 900)
    with webhook() as hook:
        alerter = Alerter(app.engine, webhook_url=hook.url, timeout_s=10)
        alerter.evaluate()
        assert len(hook.posts) == 1
    alerter.webhook_url = f"http://127.0.0.1:{free_port()}/services/T0/B0/secret-path"
    alerter.timeout_s = 2
    make_dead_letter(app, 905)
    with caplog.at_level(logging.ERROR, logger="msgx_engine.monitor.alerts"):
        ev = alerter.evaluate()
    assert ev.rose == ["dead_letters"] and ev.announce_errors and ev.announced == []
    assert len(rises(caplog, "dead_letters")) == 1                 # logged at once, webhook or not
    make_dead_letter(app, 906)                                     # another rise while the webhook is down
    alerter.evaluate()
    with webhook() as hook:
        alerter.webhook_url = hook.url
        alerter.evaluate()
        alerter.evaluate()
        assert len(hook.posts) == 1
        assert "rose from 1 to 3; new: mailbox id 905, 906." in hook.texts()[0]


def test_new_dead_outbox_events_alert_again_on_delivery_backlog(app, caplog):
    with webhook() as hook, caplog.at_level(logging.ERROR, logger="msgx_engine.monitor.alerts"):
        alerter = Alerter(app.engine, webhook_url=hook.url, timeout_s=10)
        first = dead_event(app, 50)
        ev = alerter.evaluate()
        assert ev.changed == ["delivery_backlog"]
        result = next(r for r in ev.results if r.name == "delivery_backlog")
        assert result.metadata["dead_events"] == 1 and result.metadata["dead_event_ids"] == str(first)
        assert "`msgx outbox`" in result.summary
        second = dead_event(app, 51)
        assert alerter.evaluate().rose == ["delivery_backlog"]
        assert len(hook.posts) == 2
        assert (f"delivery_backlog FAILING, rising: dead outbox event(s) rose from 1 to 2; new: event id {second}."
                in hook.texts()[1])
        alerter.evaluate()
        assert len(hook.posts) == 2
