"""``msgx request rqfd|rqrd|track`` (US-08 AC1-AC3, D16, C-24): register from the command line,
send and time out in one round; refusals exit 2 without registering."""

from __future__ import annotations

import pytest
from sqlalchemy import text


def statuses(app) -> list[tuple]:
    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT rtype, styp, fday, status FROM req_track ORDER BY req_id"))]


def test_register_then_track_sends_both(msgx, app):
    """US-08 AC1/AC2: rqfd and rqrd register (REGISTERED, nothing sent); track sends both to COUTMSGS."""
    code, fd = msgx("request", "rqfd", "--start", "2026-09-09 00:00", "--end", "2026-09-09 23:59")
    assert code == 0 and (fd["state"], fd["fday"]) == ("REGISTERED", "2026-09-09")
    code, rd = msgx("request", "rqrd", "glst")
    assert code == 0 and (rd["type"], rd["styp"]) == ("RQRD", "GLST")
    code, only_end = msgx("request", "rqfd", "--end", "2026-09-10 06:00")
    assert code == 0 and only_end["expired"] == [fd["request_id"]] and only_end["fday"] == "2026-09-10"

    code, round_ = msgx("request", "track")
    assert code == 0 and sorted(round_["sent"]) == sorted([only_end["request_id"], rd["request_id"]])
    assert [r["status"] for r in round_["open"]] == ["SENT", "SENT"]
    assert [s[3] for s in statuses(app)] == ["EXPIRED", "SENT", "SENT"]
    with app.mailbox.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM coutmsgs")).scalar_one() == 2


@pytest.mark.parametrize("argv", [
    ("request", "rqfd"),
    ("request", "rqfd", "--start", "2026-09-10 00:00", "--end", "2026-09-09 00:00"),
    ("request", "rqfd", "--start", "09SEP260000"),
    ("request", "rqfd", "--start", "2026-09-11 12:00", "--end", "2026-09-12 06:00"),   # D23: one day
    ("request", "rqfd", "--start", "2100-01-01 00:00"),                                 # SIS years
    ("request", "rqrd", "SCHD"),
])
def test_refusals_exit_2_and_register_nothing(msgx, app, argv):
    """Catalogue §6: an RQFD needs a bound, a valid 24-hour time and start <= end; D23: within one
    day and the years 2000-2099; RQRD only the 23 reference types."""
    code, err = msgx(*argv)
    assert code == 2 and err.startswith("msgx request:")
    assert statuses(app) == []
