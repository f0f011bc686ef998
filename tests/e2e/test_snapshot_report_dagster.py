"""The pump op attaches each snapshot's reconciliation headline to a FLIGHT_STATE asset event
(DESIGN §5: one event per snapshot, not per flight)."""

from __future__ import annotations

from builders import flop
from snapshot_builders import dnld, fltr, pump

from msgx_dagster.assets.specs import FLIGHT_STATE
from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.resources import MsgxResource


def test_pump_job_materializes_the_snapshot_report(settings, monkeypatch, app):
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    pump(app, dnld(fltr("A", stnd="501"), fltr("B")), flop("STND", "A", "\t\t<STND>777</STND>\n"))
    snapshot = app.mailbox.put(dnld(fltr("A", stnd="501")))
    result = pump_job.execute_in_process(resources={"msgx": MsgxResource()})
    assert result.success
    reports = [m.metadata for m in result.asset_materializations_for_node("pump_op")
               if m.asset_key == FLIGHT_STATE and "snapshot_msg_id" in m.metadata]
    assert len(reports) == 1
    meta = {k: v.value for k, v in reports[0].items()}
    assert meta["snapshot_msg_id"] == snapshot
    assert (meta["flights"], meta["compared"], meta["differing"], meta["deleted"], meta["top_fields"]) == (
        1, 1, 1, 1, "STND=1")
