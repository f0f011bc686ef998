"""The warm standby's fence, the pure judgement (msgx_dagster/standby.py): may this host start the
Dagster daemon, given the ages of the newest daemon heartbeat and of the pump heartbeat and the host
last handed the daemon? The commands are rehearsed end to end in tests/e2e/test_standby.py."""

from __future__ import annotations

import os

import pytest

from msgx_dagster.standby import MIN_STALE_AFTER_S, STALE_AFTER_S, Sighting, judge, main
from tests.private_servers import free_port


def test_the_limit_leaves_a_live_daemon_several_beats():
    """OPS-1: a daemon beats every 30 s and a pump every ~10 s: the default limit lets four daemon
    beats go missing before the host counts as gone; no limit under two missed beats is accepted."""
    assert STALE_AFTER_S >= 4 * 30 and MIN_STALE_AFTER_S >= 2 * 30
    with pytest.raises(SystemExit) as refused:
        main(["check", "--stale-after", "30"])
    assert refused.value.code == 2


def test_a_live_daemon_on_another_host_keeps_this_one_the_standby():
    """OPS-1: a second standby, or the old active host coming back, refuses while the daemon the
    instance was handed to beats within the limit, and the reason names that host and the age."""
    allowed, reason = judge(Sighting(daemon_age_s=12, pump_age_s=500, pump_host="a", claimed_by="b"), "a")
    assert not allowed
    assert "the Dagster daemon on b beat 12 s ago" in reason and "this one (a) stays the standby" in reason


def test_a_daemon_restarting_on_its_own_host_is_not_kept_out_by_its_own_heartbeat():
    assert judge(Sighting(daemon_age_s=12, pump_age_s=3, pump_host="a", claimed_by="a"), "a")[0]


def test_a_live_pump_elsewhere_refuses_even_with_the_daemon_gone():
    """The daemon may die alone while its host's pump still processes: both must be stale."""
    allowed, reason = judge(Sighting(daemon_age_s=400, pump_age_s=5, pump_host="a", claimed_by="a"), "b")
    assert not allowed and "a pump on a beat 5 s ago" in reason


@pytest.mark.parametrize("seen", [
    Sighting(daemon_age_s=121, pump_age_s=121, pump_host="a", claimed_by="a"),
    Sighting(daemon_age_s=None, pump_age_s=None, pump_host=None, claimed_by=None),     # a new installation
    Sighting(daemon_age_s=500, pump_age_s=None, pump_host=None, claimed_by="a"),      # no pump ever ran
])
def test_both_heartbeats_stale_past_the_limit_let_the_standby_take_over(seen):
    allowed, reason = judge(seen, "b")
    assert allowed and "b may run the daemon" in reason


def test_the_limit_is_the_boundary():
    seen = Sighting(daemon_age_s=60, pump_age_s=60, pump_host="a", claimed_by="a")
    assert not judge(Sighting(59, 60, "a", "a"), "b", stale_after_s=60)[0]
    assert judge(seen, "b", stale_after_s=60)[0]


def test_unreadable_databases_refuse_with_exit_2_and_no_password(tmp_path, monkeypatch, capsys):
    """Nothing known is nothing allowed: when msgx's database does not answer, the daemon unit's
    takeover exits 2 with the reason on one line, the URL's password masked."""
    for key in [k for k in os.environ if k.startswith("MSGX_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("MSGX_DB_URL", f"postgresql+psycopg://msgx:s3cret@127.0.0.1:{free_port()}/msgx")
    monkeypatch.setenv("MSGX_MAILBOX_URL", f"mysql+pymysql://msgx:s3cret@127.0.0.1:{free_port()}/mb")
    assert main(["takeover"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cannot read the Dagster instance or msgx's database: ") and "s3cret" not in err
