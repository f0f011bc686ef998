"""``msgx compare --summary --since 7d``: the go-live verdict over a synthetic seven-day parallel run
recorded in a real PostgreSQL (OPS-4): the three figures, the load per day by TYPE from proc_state and
its archive, the counting basis, pass or fail, and exit 0 / 1 / 2."""

from __future__ import annotations

import json
from datetime import datetime, time, timedelta

from sqlalchemy import insert

from msgx_engine.db import make_engine
from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.store import parallel_run
from msgx_engine.store.tables import proc_state, proc_state_archive

DAYS = 7


def figures(unexplained: int = 0, dlq: int = 0, dwell: float = 0.4, compared: int = 240, code: int = 0,
            at: datetime | None = None) -> dict:
    """One comparison's record as compare_job writes it (compare.summary.figures); its scope the live
    days as of ``at``."""
    first = ((at or datetime.now(LOCAL_TZ)).astimezone(LOCAL_TZ).date() - timedelta(days=1)).isoformat()
    if code == 2:
        return {"code": 2, "dlq_backlog": dlq, "oldest_dwell_s": dwell, "error": "reference unreadable: refused"}
    return {"code": 1 if unexplained else 0, "unexplained": unexplained, "explained": 3, "missing_here": 0,
            "missing_there": 0, "differs": unexplained, "compared": compared, "flights_here": compared,
            "flights_there": compared, "scope": f"live days: flight day {first} and later (and flights without one)",
            "not_compared": ["STATE_VERSION"], "fields": {"GTDT": unexplained} if unexplained else {},
            "dlq_backlog": dlq, "oldest_dwell_s": dwell}


def window_moments(now: datetime, per_day: int = 2) -> list[datetime]:
    """``per_day`` moments on each airport day of the last seven days, all inside the window."""
    since = now - timedelta(days=DAYS)
    out = []
    for i in range(DAYS + 1):
        day = (since + timedelta(days=i)).astimezone(LOCAL_TZ).date()
        for k in range(per_day):
            at = datetime.combine(day, time(9 + 6 * k), LOCAL_TZ)
            out.append(min(max(at, since + timedelta(minutes=10 + k)), now - timedelta(minutes=10 - k)))
    return sorted(set(out))


def record(url: str, runs: list[tuple[datetime, dict]]) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        for at, doc in runs:
            parallel_run.record(conn, doc, {"against": "postgresql+psycopg://ref/prod", "known": None}, at=at)
    engine.dispose()


def load(url: str, now: datetime) -> dict[str, dict[str, int]]:
    """Messages three and five days back (live and archived) and one older than the window."""
    three, five, old = now - timedelta(days=3), now - timedelta(days=5), now - timedelta(days=9)
    live = [(1, three, "FLOP")] * 4 + [(1, three, "SCHD")] + [(1, old, "FLOP")]
    archived = [(1, five, "FLOP")] * 2 + [(1, five, None)]
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(proc_state), [{"msg_id": 100 + i, "status": "SUCCEEDED", "created_at": at,
                                           "msg_type": t} for i, (_, at, t) in enumerate(live)])
        conn.execute(insert(proc_state_archive), [
            {"msg_id": 200 + i, "status": "SUCCEEDED", "attempts": 1, "created_at": at, "updated_at": at,
             "late_arrival": False, "msg_type": t} for i, (_, at, t) in enumerate(archived)])
    engine.dispose()
    return {three.astimezone(LOCAL_TZ).date().isoformat(): {"FLOP": 4, "SCHD": 1},
            five.astimezone(LOCAL_TZ).date().isoformat(): {"(unreadable)": 1, "FLOP": 2}}


def test_a_clean_week_passes_with_its_load_and_counting_basis(settings, cli_run):
    """OPS-4: two comparisons a day for seven days, every one with 0 unexplained differences, no dead
    letter and events delivered within a second, and one comparison that could not read the
    reference: PASS (exit 0). The load is counted per day and TYPE over proc_state and its archive
    (a message older than the window is left out), and the basis names the comparisons, the
    flights, the fields and the days."""
    now = datetime.now(LOCAL_TZ)
    moments = window_moments(now)
    record(settings.db_url, [(at, figures(at=at)) for at in moments] + [(moments[3], figures(code=2))])
    expected_load = load(settings.db_url, now)

    code, out, err = cli_run("compare", "--summary", "--since", "7d", "--json")
    assert code == 0, (out, err)
    doc = json.loads(out)
    assert doc["verdict"] == "pass" and doc["reasons"] == []
    assert doc["figures"]["unexplained_max"] == 0 and doc["figures"]["dlq_backlog_max"] == 0
    assert doc["figures"]["oldest_dwell_s_max"] == 0.4
    basis = doc["basis"]
    assert basis["comparisons"] == len(moments) and basis["unreadable"] == 1
    assert basis["unreadable_examples"][0]["error"] == "reference unreadable: refused"
    assert basis["flights_compared"] == {"min": 240, "max": 240, "total": 240 * len(moments)}
    assert basis["not_compared"] == ["STATE_VERSION"] and basis["gaps"] == []
    assert len(doc["window"]["days"]) == DAYS + 1 and sum(basis["comparisons_per_day"].values()) == len(moments)
    assert doc["load"] == expected_load

    code, text, _ = cli_run("compare", "--summary")            # 7d is the default window
    assert code == 0 and "**PASS**" in text
    assert "| unexplained business-field differences | 0 | 0 in every comparison |" in text
    assert f"- comparisons: {len(moments)} readable, 1 that could not read a side" in text
    assert "- fields: every field of the whole-state document except FLID (the key) and STATE_VERSION" in text
    # the last comparison's airport day: in the ten minutes after midnight it is still yesterday's
    first = (moments[0] - timedelta(days=1)).astimezone(LOCAL_TZ).date()
    last = moments[-1].astimezone(LOCAL_TZ).date()
    assert basis["flight_days"] == {"from": first.isoformat(), "to": last.isoformat()}
    assert f"flight days {first.isoformat()} to {last.isoformat()}; 240 to 240 per comparison" in text
    day3 = sorted(expected_load)[1]
    assert f"| {day3} | 5 | 0 | 4 | 1 |" in text       # columns: (unreadable), FLOP, SCHD


def test_each_figure_and_a_gap_fail_the_week(settings, cli_run):
    """OPS-4: one comparison with an unexplained difference, one with a dead letter waiting, one with
    an event undelivered for 7 s, and two days without a readable comparison each fail the verdict
    (exit 1) with the reason named; the worst value of each figure is reported."""
    now = datetime.now(LOCAL_TZ)
    hole = (now - timedelta(days=4), now - timedelta(days=2))        # two days without a comparison
    moments = [at for at in window_moments(now, per_day=1) if not hole[0] < at < hole[1]]
    docs = [figures() for _ in moments]
    docs[0], docs[1], docs[2] = figures(unexplained=2), figures(dlq=1), figures(dwell=7.25)
    record(settings.db_url, list(zip(moments, docs, strict=True)))

    code, out, _ = cli_run("compare", "--summary", "--since", "7d", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["verdict"] == "fail"
    assert doc["figures"] == {"unexplained_max": 2, "dlq_backlog_max": 1, "oldest_dwell_s_max": 7.25,
                              "dwell_limit_s": 5.0, "unexplained_last": 0}
    reasons = " | ".join(doc["reasons"])
    assert "1 comparison(s) found unexplained differences (at most 2)" in reasons
    assert "the dead-letter backlog reached 1" in reasons
    assert "the oldest undelivered event waited 7.2 s (limit 5 s)" in reasons
    assert "1 stretch(es) of more than 24 h without a readable comparison" in reasons
    assert len(doc["basis"]["gaps"]) == 1 and doc["basis"]["fields_with_unexplained"] == {"GTDT": 2}

    code, text, _ = cli_run("compare", "--summary", "--since", "7d")
    assert code == 1 and text.startswith("# Parallel run: go-live verdict") and "**FAIL**: " in text


def test_no_record_fails_and_an_unreadable_database_is_exit_2(settings, cli_run, monkeypatch):
    """No comparison recorded: FAIL (nothing proves the week). A state database that cannot be read:
    exit 2 with the reason on one line, never a verdict. --summary takes no reference."""
    code, out, _ = cli_run("compare", "--summary", "--since", "2d")
    assert code == 1 and "no readable comparison was recorded in the window" in out
    code, _, err = cli_run("compare", "--summary", "--against", "redis://127.0.0.1:6379/0")
    assert code == 2 and "--summary reads the recorded comparisons" in err
    code, _, err = cli_run("compare")
    assert code == 2 and "--against REF is required" in err
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url.rsplit("/", 1)[0] + "/msgx_no_such_database")
    code, out, err = cli_run("compare", "--summary")
    assert code == 2 and out == "" and err.startswith("msgx compare: cannot read the parallel-run record:")
    assert len(err.strip().splitlines()) == 1
