"""The go-live verdict over a parallel run: ``msgx compare --summary --since 7d``.

Each scheduled comparison (``compare_job``) records its figures (``figures``) in msgx's own
database (``store.parallel_run``). The summary reads the window's records back and decides:

- unexplained business-field differences: 0 in every comparison;
- dead-letter backlog (unacknowledged DEAD messages): 0 in every comparison;
- the oldest undelivered ``msg_event``'s dwell: under 5 s in every comparison;
- both of these as the worst of every hour, not as sampled: each comparison records the worst the
  health tick saw in the hour before it, and the summary also reads the hours' worst directly
  (``store.parallel_run``), so an outage between two comparisons fails the verdict;
- and no stretch of more than 24 h in the window (from its start to the first comparison, between
  two, from the last to its end) passed without a readable comparison, so "throughout" is backed by
  evidence for every day (a longer stretch is a gap, and the verdict fails).

A comparison that could not read a side is listed (with its reason) but counts as no evidence;
it fails the verdict only by leaving a gap. With it go the
counting basis (which flights, fields and days were compared, how many comparisons) and the load
(messages per day by TYPE). Exit 0 pass, 1 fail, 2 the record cannot be read.

On an installation that took the right over (promote, or a rollback to it) the summary also reports
the 48 hours after that cut-over (``observation``): the worst of each hour, whether the observation
is watching, passed or failed, and until when rollback stays possible. A failed observation makes
the exit status 1 too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.compare import observation, report
from msgx_engine.compare.observation import DWELL_LIMIT_S, short
from msgx_engine.compare.run import EXIT_DIFFERENT, EXIT_SAME, EXIT_UNREADABLE, Outcome
from msgx_engine.db import make_engine
from msgx_engine.redact import safe_text
from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.store import parallel_run
from msgx_engine.store.parallel_run import Hour, RecordedRun

MAX_GAP = timedelta(hours=24)     # the longest stretch of the window allowed without a readable comparison
SAMPLED_EVERY = timedelta(hours=1)    # compare_job's schedule: a comparison records the worst of the hour before it


def figures(outcome: Outcome, *, dlq_backlog: int, oldest_dwell_s: float, readings: int = 0) -> dict[str, Any]:
    """What one comparison records: its report's counts (or why it could not compare) and the two
    operational figures, the worst of the hour before it (``readings``: the health ticks behind them)."""
    doc: dict[str, Any] = {"code": outcome.code, "dlq_backlog": int(dlq_backlog),
                           "oldest_dwell_s": round(float(oldest_dwell_s), 3), "readings": int(readings)}
    if outcome.report is None:
        return {**doc, "error": outcome.error or "unreadable"}
    r = outcome.report
    classes = r["differences"]["by_class"]
    return {**doc, "unexplained": r["differences"]["unexplained"], "explained": classes["explained"],
            "missing_here": classes["missing_here"], "missing_there": classes["missing_there"],
            "differs": classes["differs"], "compared": r["flights"]["compared"],
            "flights_here": r["flights"]["here"], "flights_there": r["flights"]["there"],
            "scope": r["scope"], "not_compared": r["not_compared"],
            "fields": {name: e["unexplained"] for name, e in r["fields"].items()}}


def local_day(at: datetime) -> date:
    return at.astimezone(LOCAL_TZ).date()


def summarize(runs: Sequence[RecordedRun], load: Mapping[date, Mapping[str, int]], *, since: datetime,
              now: datetime, hours: Sequence[Hour] = ()) -> dict[str, Any]:
    """The verdict over ``runs`` (oldest first) and the ``hours``' worst readings in the window
    ``since``..``now``; pure."""
    readable = [r for r in runs if r.figures.get("code") in (EXIT_SAME, EXIT_DIFFERENT)]
    unreadable = [r for r in runs if r.figures.get("code") not in (EXIT_SAME, EXIT_DIFFERENT)]
    days = [local_day(since) + timedelta(days=i) for i in range((local_day(now) - local_day(since)).days + 1)]
    per_day = {d: 0 for d in days}
    for r in readable:
        per_day[local_day(r.at)] = per_day.get(local_day(r.at), 0) + 1
    moments = [since, *(r.at for r in readable if since <= r.at <= now), now]
    gaps = [(a, b) for a, b in zip(moments, moments[1:], strict=False) if b - a > MAX_GAP]

    def worst(key: str) -> float:
        return max((float(r.figures.get(key) or 0) for r in readable), default=0.0)

    unexplained = int(worst("unexplained"))
    dlq = max(int(worst("dlq_backlog")), max((h.worst.dlq for h in hours), default=0))
    dwell = max(worst("oldest_dwell_s"), max((h.worst.dwell_s for h in hours), default=0.0))
    worst_hour = max(hours, key=lambda h: h.worst.dwell_s, default=None)
    failing = [r for r in readable if r.figures.get("unexplained")]
    fields: dict[str, int] = {}
    for r in readable:
        for name, n in (r.figures.get("fields") or {}).items():
            fields[name] = fields.get(name, 0) + int(n)
    reasons = []
    if not readable:
        reasons.append("no readable comparison was recorded in the window")
    if unexplained:
        reasons.append(f"{len(failing)} comparison(s) found unexplained differences (at most {unexplained})")
    if dlq:
        reasons.append(f"the dead-letter backlog reached {dlq}")
    if dwell >= DWELL_LIMIT_S:
        when = (f" (worst in the hour from {short(worst_hour.hour)})"
                if worst_hour is not None and worst_hour.worst.dwell_s == dwell else "")
        reasons.append(f"the oldest undelivered event waited {dwell:.1f} s{when} (limit {DWELL_LIMIT_S:.0f} s)")
    if readable and gaps:
        reasons.append(f"{len(gaps)} stretch(es) of more than {MAX_GAP.total_seconds() / 3600:.0f} h without a "
                       "readable comparison: " + ", ".join(f"{short(a)} to {short(b)}" for a, b in gaps))
    compared = [int(r.figures.get("compared") or 0) for r in readable]
    first_days = sorted({m.group(1) for r in readable
                         if (m := re.search(r"flight day (\d{4}-\d{2}-\d{2})", str(r.figures.get("scope", ""))))})
    return {
        "verdict": "fail" if reasons else "pass",
        "reasons": reasons,
        "window": {"since": since.isoformat(), "until": now.isoformat(),
                   "days": [d.isoformat() for d in days]},
        "figures": {"unexplained_max": unexplained, "dlq_backlog_max": dlq, "oldest_dwell_s_max": dwell,
                    "dwell_limit_s": DWELL_LIMIT_S,
                    "unexplained_last": int(readable[-1].figures.get("unexplained") or 0) if readable else None},
        "basis": {
            "comparisons": len(readable), "unreadable": len(unreadable),
            "hours_watched": len(hours), "health_readings": sum(h.worst.readings for h in hours),
            "comparisons_per_day": {d.isoformat(): n for d, n in sorted(per_day.items())},
            "gaps": [{"from": a.isoformat(), "to": b.isoformat()} for a, b in gaps],
            "references": sorted({str(r.selection.get("against", "?")) for r in readable}),
            "scopes": sorted({str(r.figures.get("scope", "?")) for r in readable}),
            "flight_days": {"from": first_days[0], "to": local_day(readable[-1].at).isoformat()} if first_days
            else None,
            "flights_compared": {"min": min(compared, default=0), "max": max(compared, default=0),
                                 "total": sum(compared)},
            "not_compared": sorted({f for r in readable for f in r.figures.get("not_compared") or []}),
            "fields_with_unexplained": dict(sorted(fields.items(), key=lambda kv: (-kv[1], kv[0]))),
            "unreadable_examples": [{"at": r.at.isoformat(), "error": str(r.figures.get("error", ""))}
                                    for r in unreadable[:5]],
        },
        "load": {d.isoformat(): dict(sorted(types.items())) for d, types in sorted(load.items())},
    }


def _scopes(basis: dict[str, Any]) -> str:
    """The flights compared: one line for the usual hourly comparisons of the live days."""
    scopes, days = basis["scopes"], basis["flight_days"]
    if days and len(scopes) > 1 and all(x.startswith("live days") for x in scopes):
        return (f"the live days of each comparison (its flight day yesterday and later, and flights without one): "
                f"flight days {days['from']} to {days['to']}")
    return "; ".join(scopes) or "none"


def as_markdown(doc: dict[str, Any]) -> str:
    f, b, w = doc["figures"], doc["basis"], doc["window"]
    lines = ["# Parallel run: go-live verdict", "",
             f"- window: {short(datetime.fromisoformat(w['since']))} to {short(datetime.fromisoformat(w['until']))} "
             f"airport time ({len(w['days'])} day(s))", "",
             f"**{doc['verdict'].upper()}**" + ("" if not doc["reasons"] else ": " + "; ".join(doc["reasons"])), "",
             "## The three figures (worst over the window, every hour's worst included)", "",
             "| figure | worst | required |", "|---|---:|---|",
             f"| unexplained business-field differences | {f['unexplained_max']} | 0 in every comparison |",
             f"| dead-letter backlog (unacknowledged) | {f['dlq_backlog_max']} | 0 |",
             f"| oldest undelivered event dwell (s) | {f['oldest_dwell_s_max']:.1f} | under "
             f"{f['dwell_limit_s']:.0f} s |", "",
             "## Counting basis", "",
             f"- comparisons: {b['comparisons']} readable, {b['unreadable']} that could not read a side",
             f"- hours watched by the health tick: {b['hours_watched']} ({b['health_readings']} readings)",
             f"- against: {', '.join(b['references']) or 'none'}",
             f"- flights: {_scopes(b)}; {b['flights_compared']['min']} to "
             f"{b['flights_compared']['max']} per comparison, {b['flights_compared']['total']} in all",
             "- fields: every field of the whole-state document except FLID (the key)"
             + (f" and {', '.join(b['not_compared'])} (msgx's own bookkeeping)" if b["not_compared"] else ""),
             "- days (airport time), comparisons per day: "
             + ", ".join(f"{d} {n}" for d, n in b["comparisons_per_day"].items())]
    if b["fields_with_unexplained"]:
        lines.append("- fields with unexplained differences (summed over comparisons): "
                     + ", ".join(f"{'(whole flight)' if k == '*' else k} {n}"
                                 for k, n in b["fields_with_unexplained"].items()))
    for u in b["unreadable_examples"]:
        lines.append(f"- could not compare at {u['at']}: {u['error']}")
    lines += ["", "## Load (messages registered per day by TYPE)", ""]
    if doc["load"]:
        types = sorted({t for per in doc["load"].values() for t in per})
        lines += ["| day | total | " + " | ".join(types) + " |", "|---|---:|" + "---:|" * len(types)]
        for d, per in doc["load"].items():
            lines.append(f"| {d} | {sum(per.values())} | " + " | ".join(str(per.get(t, 0)) for t in types) + " |")
    else:
        lines.append("No message was registered in the window.")
    if doc.get("observation"):
        lines += ["", observation.as_markdown(doc["observation"]).rstrip("\n")]
    return "\n".join(lines) + "\n"


def run(db_url: str, since: timedelta, *, as_json: bool = False, now: datetime | None = None) -> Outcome:
    """Read the record and the load, decide, render."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            end = now or conn.exec_driver_sql("SELECT now()").scalar_one()
            start = end - since
            runs = parallel_run.runs_since(conn, start)
            load = parallel_run.load_by_day(conn, start)
            hours = parallel_run.hours_between(conn, start, end)
            watch = observation.read(conn, end)
    except SQLAlchemyError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        return Outcome(EXIT_UNREADABLE, error=f"cannot read the parallel-run record: {safe_text(first, 200)}")
    finally:
        engine.dispose()
    doc = {**summarize(runs, load, since=start, now=end, hours=hours), "observation": watch}
    text = report.dumps(doc) if as_json else as_markdown(doc)
    failed = doc["verdict"] != "pass" or (watch is not None and watch["state"] == "failed")
    return Outcome(EXIT_DIFFERENT if failed else EXIT_SAME, text, report=doc)
