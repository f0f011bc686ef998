"""``msgx status`` as text for a terminal and as JSON for scripts: the same content, two shapes.

The text is one screen in aligned columns: the verdict first, then every check with its cause
(and, for a failing one, the first command to run and its runbook section), then the backlog,
the pump, the dead letters, the outbox, the snapshots and the projection. Ages are whole
seconds against the state database's clock, the clock that stamped the rows.

The JSON keys are stable (documented in docs/runbook.md, "The status command"); a value that does
not apply is null, never a missing key.
"""

from __future__ import annotations

import shutil
import textwrap
from datetime import datetime

from msgx_engine.monitor.status import StatusReport

UNREACHABLE = "unreachable"


def _age(now: datetime, at: datetime | None) -> float | None:
    return None if at is None else round(max((now - at).total_seconds(), 0.0), 1)


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    s = int(value)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _clip(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (a long word is cut too, unlike textwrap.shorten)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def verdict(report: StatusReport) -> str:
    failing = [c for c in report.failing if c.state == "FAILING"]
    warns = [c for c in report.failing if c.state == "WARN"]
    if not failing and not warns:
        return f"healthy: all {len(report.checks)} checks pass"
    parts = []
    if failing:
        parts.append(f"{len(failing)} failing ({', '.join(c.name for c in failing)})")
    if warns:
        parts.append(f"{len(warns)} warning{'s' if len(warns) > 1 else ''} ({', '.join(c.name for c in warns)})")
    return "NOT HEALTHY: " + "; ".join(parts)


def as_json(report: StatusReport) -> dict[str, object]:
    """The report for scripts: every section of the text, with numbers as numbers."""
    now = report.now
    b, p = report.backlog, report.pump
    return {
        "status": "ok" if report.exit_code == 0 else "failing",
        "exit_code": report.exit_code,
        "now": now.isoformat(),
        "mode": report.mode,
        "cutover": report.cutover,
        "checks": [{"name": c.name, "state": c.state, "severity": c.severity, "cause": c.cause, "value": c.value,
                    "first_command": c.first_command, "runbook": c.runbook} for c in report.checks],
        "backlog": {"open_messages": b.open_messages, "head_id": b.head_id, "head_age_s": round(b.head_age_s, 1),
                    "mailbox_up": b.mailbox_up, "unregistered_rows": b.unregistered_rows,
                    "unregistered_capped": b.unregistered_capped, "mailbox_error": b.mailbox_error,
                    "unregistered_oldest_age_s": None if b.unregistered_oldest_age_s is None
                    else round(b.unregistered_oldest_age_s, 1),
                    "mailbox_marks_pending": b.backfill_pending,
                    "mailbox_marks_oldest_age_s": round(b.backfill_oldest_age_s, 1)},
        "pump": {"lock_held": p.lock_held, "last_heartbeat": p.last_heartbeat.isoformat() if p.last_heartbeat else None,
                 "heartbeat_age_s": None if p.heartbeat_age_s is None else round(p.heartbeat_age_s, 1),
                 "started_at": p.started_at.isoformat() if p.started_at else None, "host": p.host, "pid": p.pid},
        "dead_letters": {"waiting": report.dead_letters_waiting, "oldest": [
            {"msg_id": d.msg_id, "type": d.msg_type, "styp": d.msg_styp, "reason": d.reason,
             "error_class": d.error_class, "error": d.error_excerpt, "replayable": d.replayable,
             "registered_at": d.registered_at.isoformat(),
             "dead_at": d.dead_at.isoformat() if d.dead_at else None} for d in report.dead_letters]},
        "outbox": [{"topic": t.topic, "undelivered": t.undelivered,
                    "oldest_undelivered_age_s": _age(now, t.oldest_released_at), "dead": t.dead}
                   for t in report.outbox],
        "snapshots": {"live_since": report.live_since.isoformat(), "days": [
            {"day": s.day.isoformat(), "msg_id": s.msg_id, "styp": s.styp, "version": s.version,
             "flights": s.flights, "written": s.written, "deleted": s.deleted, "kept_later": s.kept_later,
             "differing": s.differing, "at": s.at.isoformat()} for s in report.snapshots]},
        "projection": {"configured": report.projection.configured, "measured": report.projection.measured,
                       "differing_flights": report.projection.differing, "error": report.projection.error},
    }


def unreachable_json(reason: str) -> dict[str, object]:
    return {"status": UNREACHABLE, "exit_code": 2, "reason": reason}


def _table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    out = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    out += [indent + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out


def dead_letter_commands(report: StatusReport) -> list[str]:
    """What to run for the listed dead letters, replayable ones apart: only those a replay cannot
    fix are offered to ``msgx acknowledge``, so pasting the line never closes a fixable one."""
    replayable = [str(d.msg_id) for d in report.dead_letters if d.replayable]
    final = [str(d.msg_id) for d in report.dead_letters if not d.replayable]
    out = []
    if replayable:
        out += [f"  replayable once the cause is fixed: {' '.join(replayable)}",
                f"    preview their replay:   msgx replay --ids {','.join(replayable)}"]
    if final:
        out += [f"  a replay cannot fix: {' '.join(final)}",
                f"    close without a replay: msgx acknowledge {' '.join(final)} --operator NAME --reason TEXT"]
    return out


def render_text(report: StatusReport, width: int | None = None) -> str:
    width = width or max(shutil.get_terminal_size((110, 40)).columns, 80)
    now = report.now
    lines = [f"msgx status ({report.mode}, {_when(now)}): {verdict(report)}", ""]
    if report.cutover is not None:
        lines += [f"CUT-OVER: {report.cutover}. No pump, dispatcher or request runs here by design; the "
                  "installation that took over processes the mailbox. `msgx cutover resume` or `msgx cutover "
                  "rollback` gives the writes back.", ""]

    name_w = max(len(c.name) for c in report.checks) if report.checks else 10
    lead = 2 + name_w + 2 + 7 + 2
    lines.append(f"  {'CHECK'.ljust(name_w)}  {'STATE'.ljust(7)}  CAUSE")
    for c in report.checks:
        cause = textwrap.wrap(c.cause, max(width - lead, 30)) or [""]
        lines.append(f"  {c.name.ljust(name_w)}  {c.state.ljust(7)}  {cause[0]}")
        lines += [" " * lead + more for more in cause[1:3]]
        if len(cause) > 3:
            lines[-1] += " …"
        if c.state != "OK":
            lines.append(" " * lead + (f"first: {c.first_command}   " if c.first_command else "") + f"see {c.runbook}")

    b = report.backlog
    if b.mailbox_up is None:
        mailbox_row = ["unregistered mailbox rows", "-", "the mailbox was not read"]
    elif not b.mailbox_up:
        mailbox_row = ["unregistered mailbox rows", "?", _clip(
            f"the mailbox did not answer: {b.mailbox_error or 'no reason given'}", max(width - 40, 30))]
    else:
        count = f"{b.unregistered_rows or 0}{'+' if b.unregistered_capped else ''}"
        age = b.unregistered_oldest_age_s
        detail = ("" if not b.unregistered_rows else "oldest of unknown age (no insert time)" if age is None
                  else f"oldest inserted {_secs(age)} ago")
        mailbox_row = ["unregistered mailbox rows", count, detail]
    lines += ["", "BACKLOG"] + _table(["WHAT", "COUNT", "DETAIL"], [
        ["open messages (registered)", str(b.open_messages),
         f"head {b.head_id}, registered {_secs(b.head_age_s)} ago" if b.head_id is not None else ""],
        mailbox_row,
        ["mailbox marks to write", str(b.backfill_pending),
         f"oldest queued {_secs(b.backfill_oldest_age_s)} ago" if b.backfill_pending else ""],
    ])

    p = report.pump
    lines += ["", "PUMP", f"  writer lock  {'held: a pump is running' if p.lock_held else 'free: no pump is running'}"]
    if p.last_heartbeat is None:
        lines.append("  heartbeat    never (no pump has run against this database)")
    else:
        lines += [f"  heartbeat    {_secs(p.heartbeat_age_s)} ago ({_when(p.last_heartbeat)})",
                  f"  last pump    host {p.host or '?'}, pid {p.pid or '?'}, started {_when(p.started_at)}"]

    shown = len(report.dead_letters)
    lines += ["", f"DEAD LETTERS: {report.dead_letters_waiting} waiting for an operator"
              + (f" (the {shown} oldest below)" if report.dead_letters_waiting > shown else "")]
    if report.dead_letters:
        fixed = [[str(d.msg_id), f"{d.msg_type or '?'}/{d.msg_styp or '?'}", d.reason or "-",
                  d.registered_at.strftime("%m-%d %H:%M:%S")] for d in report.dead_letters]
        used = 2 + sum(max(len(h), *(len(r[i]) for r in fixed)) + 2
                       for i, h in enumerate(["ID", "TYPE/STYP", "REASON", "REGISTERED"]))
        rows = [row + [_clip(" ".join(x for x in (d.error_class, d.error_excerpt) if x) or "-",
                             max(width - used, 24))]
                for row, d in zip(fixed, report.dead_letters, strict=True)]
        lines += _table(["ID", "TYPE/STYP", "REASON", "REGISTERED", "ERROR"], rows)
        lines += dead_letter_commands(report)

    lines += ["", "OUTBOX (events for Kafka)"]
    if report.outbox:
        lines += _table(["TOPIC", "UNDELIVERED", "OLDEST", "DEAD"], [
            [t.topic, str(t.undelivered), _secs(_age(now, t.oldest_released_at)), str(t.dead)]
            for t in report.outbox])
    else:
        lines.append("  every released event is delivered")

    lines += ["", f"SNAPSHOTS (newest per day, from {report.live_since.isoformat()})"]
    if report.snapshots:
        lines += _table(["DAY", "MAILBOX ID", "STYP", "VERSION", "FLIGHTS", "WRITTEN", "DELETED", "DIFFERING",
                         "AT"], [
            [s.day.isoformat(), str(s.msg_id), s.styp, str(s.version), str(s.flights), str(s.written),
             str(s.deleted), "-" if s.differing is None else str(s.differing), _when(s.at)]
            for s in report.snapshots])
    else:
        lines.append("  none for these days")

    pr = report.projection
    lines += ["", "PROJECTION (Redis flightInfo)", "  " + (
        "not configured (MSGX_REDIS_URL unset)" if not pr.configured else
        f"not measured here: {pr.error}" if not pr.measured else
        f"{pr.differing} flight(s) differ from PostgreSQL")]
    return "\n".join(lines)
