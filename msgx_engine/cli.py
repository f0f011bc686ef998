"""The msgx command: run, inspect and operate msgx from a shell."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from msgx_engine.config import MODE_PRODUCTION, ConfigError, Settings
from msgx_engine.logcontext import LOG_FORMAT, install_mode
from msgx_engine.logsink import StderrHandler
from msgx_engine.redact import RedactingFilter

if TYPE_CHECKING:
    from msgx_engine.store.version_floor import Published

log = logging.getLogger("msgx")


def install_redaction() -> None:
    """Every handler of the root logger drops URL passwords and clips long lines (OPS-2)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def _env_mode() -> str:
    """The mode for the log context before Settings are read (an unknown value is refused by
    Settings; until then it shows as given)."""
    return (os.environ.get("MSGX_MODE") or MODE_PRODUCTION).strip().lower() or MODE_PRODUCTION


def _signed(args: argparse.Namespace) -> bool:
    """An audited action names its operator and reason (neither blank)."""
    return bool((args.operator or "").strip() and (args.reason or "").strip())


def _settings() -> Settings:
    return Settings.from_env().resolved()


def _app():
    from msgx_engine.app import App

    return App.from_settings(_settings())


# --- db ----------------------------------------------------------------------------------------
def cmd_db(args: argparse.Namespace) -> int:
    from msgx_engine.db import make_engine
    from msgx_engine.store import migrate

    engine = make_engine(_settings().db_url or "")
    if args.action == "upgrade":
        migrate.upgrade(engine, args.revision or "head")
    elif args.action == "downgrade":
        migrate.downgrade(engine, args.revision or "base")
    print(f"state database at revision {migrate.current_revision(engine)}")
    return 0


# --- mailbox -----------------------------------------------------------------------------------
def cmd_mailbox(args: argparse.Namespace) -> int:
    from msgx_engine.mailbox.adapter import Mailbox

    settings = _settings()
    mailbox = Mailbox(settings.mailbox_url or "", read_only=settings.shadow)
    if args.action == "init":
        mailbox.init()
        print("mailbox tables cminmsgs and coutmsgs ready")
        return 0
    ids = []
    for name in args.files:
        data = Path(name).read_bytes()
        ids.append(mailbox.put(data.decode("utf-8")))
    print(f"inserted {len(ids)} message(s): ids {ids[0]}..{ids[-1]}" if ids else "nothing inserted")
    return 0


# --- pump --------------------------------------------------------------------------------------
def print_status_table(counts: dict[str, int], reasons: list[tuple[str, str | None, int]] | None = None) -> None:
    print(f"{'status':<12}{'count':>8}")
    from msgx_engine.store.queue import Status

    for status in (Status.SUCCEEDED, Status.SKIPPED, Status.DEAD, Status.FAILED, Status.PENDING):
        print(f"{status:<12}{counts.get(status, 0):>8}")
    if reasons:
        print(f"\n{'status':<12}{'reason':<28}{'count':>8}")
        for word, reason, n in reasons:
            print(f"{word:<12}{(reason or '-'):<28}{n:>8}")


def reason_counts(app) -> list[tuple[str, str | None, int]]:
    from msgx_engine.store import queue_figures

    with app.engine.connect() as conn:
        return queue_figures.reason_counts(conn)


def run_pump(app, *, drain: bool, idle_for_s: float = 0.0, max_runtime_s: float = 3600.0) -> int:
    from msgx_engine.pipeline.intake import StateBehindMailbox
    from msgx_engine.pipeline.pump import PumpBusy, PumpOptions, status_counts

    app.check_ready()
    opts = PumpOptions(idle_for_s=0.0 if drain else idle_for_s, max_runtime_s=max_runtime_s)
    try:     # a dispatcher process (msgx dispatch) hears each release at once (P19, release NOTIFY)
        with app.release_notifier() as announce:
            summary = app.pump(opts, on_release=announce).run()
    except PumpBusy as exc:
        print(f"msgx pump: {exc}", file=sys.stderr)
        return 3
    except StateBehindMailbox as exc:
        print(f"msgx pump: {exc}", file=sys.stderr)
        return 4
    with app.engine.connect() as conn:
        counts = status_counts(conn)
    print(f"pump finished in {summary.elapsed_s:.2f}s: registered {summary.registered}, "
          f"processed {sum(summary.processed.values())}, marked {summary.marked}")
    print_status_table(counts, reason_counts(app))
    return 0


def cmd_pump(args: argparse.Namespace) -> int:
    return run_pump(_app(), drain=args.drain, idle_for_s=args.idle_for, max_runtime_s=args.max_runtime)


def cmd_flights(args: argparse.Namespace) -> int:
    from msgx_engine.state.serialize import state_document
    from msgx_engine.store.flights import FlightRepository

    app = _app()
    with app.engine.connect() as conn, conn.begin():
        states = FlightRepository(conn).load_all_current()
    print(json.dumps([state_document(s) for s in states], ensure_ascii=False, indent=1, sort_keys=True))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """A flight's versions, oldest first: the message behind each, the fields it changed, and
    whether its events reached Kafka and Redis (``store/history.py``). Exit 2: no such flight."""
    from msgx_engine.store.history import flight_history, history_lines

    app = _app()
    try:
        with app.engine.connect() as conn:
            changes = flight_history(conn, args.flid)
    finally:
        app.dispose()
    kafka, redis = bool(app.settings.kafka_bootstrap), bool(app.settings.redis_url)
    if not changes:
        print(f"msgx history: msgx has written no version of flight {args.flid} (not a FLID it has seen, or "
              "archived and purged)", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"flid": args.flid, "changes": [
            c.as_json(kafka_configured=kafka, redis_configured=redis) for c in changes]}, ensure_ascii=False, indent=1))
    else:
        print("\n".join(history_lines(args.flid, changes, kafka_configured=kafka, redis_configured=redis)))
    return 0


def cmd_snapshot_report(args: argparse.Namespace) -> int:
    """The reconciliation reports as a JSON list, oldest first (``[]`` when there is none)."""
    from msgx_engine.store.ledger import read_reports

    app = _app()
    try:
        with app.engine.connect() as conn:
            reports = read_reports(conn, day=args.day, latest=args.day is None)
    finally:
        app.dispose()
    print(json.dumps(reports, ensure_ascii=False, indent=1, sort_keys=True))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """One screen: every health check with its cause, the backlog, the pump, dead letters, the outbox,
    snapshots. Exit 0 healthy, 1 a check fails (warnings included), 2 the state database is unreadable."""
    from msgx_engine.monitor.status import EXIT_UNREACHABLE, StateUnreachable, gather
    from msgx_engine.monitor.status_render import as_json, render_text, unreachable_json

    app = _app()
    try:
        report = gather(app.engine, app.mailbox, mode=app.mode,
                        drift_probe=app.projection_drift if app.settings.redis_url else None,
                        kafka_configured=bool(app.settings.kafka_bootstrap))
    except StateUnreachable as exc:
        if args.json:
            print(json.dumps(unreachable_json(str(exc))))
        print(f"msgx status: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    finally:
        app.dispose()
    print(json.dumps(as_json(report), ensure_ascii=False, indent=1) if args.json else render_text(report))
    return report.exit_code


def cmd_compare(args: argparse.Namespace) -> int:
    """This installation's flights against a reference, field by field; exit 0 nothing unexplained,
    1 unexplained differences, 2 a side cannot be read."""
    from msgx_engine.compare.run import run

    if args.summary:
        return _compare_summary(args)
    if not args.against:
        print("msgx compare: --against REF is required (or --summary for the parallel run's verdict)",
              file=sys.stderr)
        return 2
    outcome = run(_settings().db_url or "", args.against, day=args.day, known=args.known, key=args.key,
                  as_json=args.json)
    if outcome.output:
        print(outcome.output, end="")
    if outcome.error:
        print(f"msgx compare: {outcome.error}", file=sys.stderr)
    return outcome.code


def _compare_summary(args: argparse.Namespace) -> int:
    """``--summary``: the go-live verdict over the recorded comparisons of the last ``--since``."""
    from msgx_engine.compare import summary
    from msgx_engine.config import parse_duration

    if args.against or args.day or args.known or args.key:
        print("msgx compare: --summary reads the recorded comparisons; it takes only --since and --json",
              file=sys.stderr)
        return 2
    outcome = summary.run(_settings().db_url or "", parse_duration(args.since, name="--since"), as_json=args.json)
    if outcome.output:
        print(outcome.output, end="")
    if outcome.error:
        print(f"msgx compare: {outcome.error}", file=sys.stderr)
    return outcome.code


def cmd_dispatch(args: argparse.Namespace) -> int:
    from msgx_engine.delivery.runner import run_dispatch

    return run_dispatch(_settings(), drain=args.drain)


def cmd_serve(args: argparse.Namespace) -> int:
    from msgx_engine.http.server import serve

    return serve(host=args.host, port=args.port, allow_public=args.allow_public, tls_cert=args.tls_cert,
                 tls_key=args.tls_key, behind_tls_proxy=args.behind_tls_proxy)


# --- request (US-08, D16, request lifecycle) ------------------------------------------------------------------------
def _request_time(name: str, value: str | None):
    """An optional ``--start``/``--end`` in the POST /schd/sync format (24-hour local time)."""
    from msgx_engine.http.schd_sync import parse_time

    return None if value is None else parse_time(name, value)


def request_rqfd(tracker, start: str | None, end: str | None) -> dict[str, object]:
    """Register an RQFD; either bound may be omitted, not both (catalogue §6); one day only (D23, a RESP's day)."""
    first, last = _request_time("--start", start), _request_time("--end", end)
    return tracker.register_rqfd(first, last).as_json()


def request_rqrd(tracker, rtype: str) -> dict[str, object]:
    """Register an RQRD for one of the 23 reference types."""
    return tracker.register_rqrd(rtype).as_json()


def request_track(tracker) -> dict[str, object]:
    """One tracking round (send pending, expire timeouts) and what is still open."""
    return {**tracker.track().as_json(), "open": tracker.open_requests()}


def cmd_request(args: argparse.Namespace) -> int:
    from msgx_engine.http.errors import ApiError
    from msgx_engine.requests.tracker import RequestTracker
    from msgx_engine.sis.requests import RequestInvalid
    from msgx_engine.store.cutover_state import RequestsStopped

    app = _app()
    try:
        tracker = RequestTracker(app.engine, app.mailbox, app.clock)
        if args.action == "rqfd":
            doc = request_rqfd(tracker, args.start, args.end)
        elif args.action == "rqrd":
            doc = request_rqrd(tracker, args.rtype)
        else:
            doc = request_track(tracker)
    except (RequestInvalid, ApiError, RequestsStopped) as exc:
        print(f"msgx request: {exc}", file=sys.stderr)
        return 2
    finally:
        app.dispose()
    print(json.dumps(doc, ensure_ascii=False, default=str))
    return 0


# --- replay and skip (US-10, D24, vanished mailbox row) ---------------------------------------------------------------
def _when(name: str, value: str | None, now):
    """``--since``/``--until``: an ISO date-time (naive means UTC) or a duration back from now (``2h``)."""
    from datetime import UTC, datetime

    from msgx_engine.config import parse_duration

    if value is None:
        return None
    if value.strip()[-1:].lower() in ("s", "m", "h", "d") and value.strip()[:-1].isdigit():
        return now - parse_duration(value, name=name)
    try:
        when = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ConfigError(f"{name} {value!r} is neither an ISO date-time nor a duration like 2h") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _ids(values: list[str] | None) -> tuple[int, ...]:
    out: list[int] = []
    for v in values or []:
        for part in v.replace(",", " ").split():
            if not part.isdigit():
                raise ConfigError(f"--ids {part!r} is not a mailbox id")
            out.append(int(part))
    return tuple(dict.fromkeys(out))


def replay_selection(args: argparse.Namespace, now):
    """The selection of ``msgx replay``: by failure reason with --select-reason; --reason is only
    the operator's audit text of an --apply, never a filter."""
    from msgx_engine.store.queue_selection import Selection

    return Selection(ids=_ids(args.ids), statuses=tuple(args.status or ()), reasons=tuple(args.select_reason or ()),
                     since=_when("--since", args.since, now), until=_when("--until", args.until, now))


def cmd_replay(args: argparse.Namespace) -> int:
    from msgx_engine.operations.replay import Replayer

    app = _app()
    try:
        now = app.clock.now()
        if not args.apply and args.reason is not None:
            print("msgx replay: --reason is the audit text of --apply; a preview selects by failure reason with "
                  "--select-reason (for example --select-reason unsupported)", file=sys.stderr)
            return 2
        sel = replay_selection(args, now)
        if sel.empty:
            print("msgx replay: a selection is required (--ids, --status, --select-reason, --since/--until); "
                  "there is no replay of everything", file=sys.stderr)
            return 2
        replayer = Replayer(app.engine, app.mailbox, max_body_bytes=app.settings.max_body_bytes)
        if not args.apply:
            report = replayer.preview(sel)
            print("\n".join(report.lines()))
            ok = [str(i.row.msg_id) for i in report.items if not i.refusal]
            if ok:
                shown = ",".join(ok[:50]) + (",..." if len(ok) > 50 else "")
                print(f"to replay: msgx replay --ids {shown} --apply --operator NAME --reason TEXT"
                      + (" --force-stale REASON" if report.stale else ""))
            return 0
        if not (args.operator or "").strip() or not (args.reason or "").strip():
            print("msgx replay: --apply needs --operator NAME and --reason TEXT (select by failure reason with "
                  "--select-reason)", file=sys.stderr)
            return 2
        result = replayer.apply(sel, operator=args.operator, reason=args.reason, now=now,
                                force_stale=args.force_stale)
        print("\n".join(result.report.lines()))
        if not result.applied:
            for why in result.refused_because:
                print(f"msgx replay: refused, nothing re-queued: {why}", file=sys.stderr)
            print(f"audit {result.audit_id}: refused")
            return 2
        print(f"re-queued {len(result.requeued)} message(s); audit {result.audit_id}")
        return 0
    finally:
        app.dispose()


def cmd_skip(args: argparse.Namespace) -> int:
    from msgx_engine.operations.skip import skip

    app = _app()
    try:
        result = skip(app.engine, args.msg_id, operator=args.operator, reason=args.reason, now=app.clock.now())
    finally:
        app.dispose()
    if not result.skipped:
        print(f"msgx skip: mailbox id {args.msg_id} {result.refusal}; audit {result.audit_id}", file=sys.stderr)
        return 2
    print(f"mailbox id {args.msg_id}: {result.before} -> SKIPPED(operator_skip); audit {result.audit_id}")
    return 0


# --- acknowledge and outbox: dead letters and dead events with a lifecycle ---------------------------
def _mailbox_ids(values: list[str], what: str) -> list[int]:
    out: list[int] = []
    for v in values:
        for part in v.replace(",", " ").split():
            if not part.isdigit():
                raise ConfigError(f"{part!r} is not {what}")
            out.append(int(part))
    return list(dict.fromkeys(out))


def cmd_acknowledge(args: argparse.Namespace) -> int:
    from msgx_engine.operations.acknowledge import acknowledge

    ids = _mailbox_ids(args.ids, "a mailbox id")
    if not ids or not args.operator.strip() or not args.reason.strip():
        print("msgx acknowledge: give mailbox ids, --operator NAME and --reason TEXT", file=sys.stderr)
        return 2
    app = _app()
    try:
        result = acknowledge(app.engine, ids, operator=args.operator, reason=args.reason, now=app.clock.now(),
                             even_if_replayable=args.even_if_replayable)
    finally:
        app.dispose()
    if not result.applied:
        for line in result.lines():
            print(f"msgx acknowledge: {line}", file=sys.stderr)
        print(f"msgx acknowledge: refused, nothing acknowledged ({'; '.join(result.refused_because)}); "
              f"audit {result.audit_id}", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    print(f"acknowledged {len(result.acknowledged)} message(s): they no longer count as waiting dead letters "
          f"and are archived normally; audit {result.audit_id}")
    return 0


def cmd_outbox(args: argparse.Namespace) -> int:
    from msgx_engine.operations import outbox_ops

    ids = _mailbox_ids(args.ids or [], "an event id")
    if not args.apply:
        if ids or args.all_dead or args.operator or args.reason:
            print("msgx outbox: --ids, --all-dead, --operator and --reason go with --apply", file=sys.stderr)
            return 2
        app = _app()
        try:
            view = outbox_ops.preview(app.engine, app.clock.now())
        finally:
            app.dispose()
        print(json.dumps(view.as_json(), ensure_ascii=False, indent=1) if args.json else "\n".join(view.lines()))
        return 0
    if not _signed(args) or bool(ids) == args.all_dead:
        print("msgx outbox: --apply needs --operator NAME, --reason TEXT and either --ids EVENT_ID... "
              "or --all-dead", file=sys.stderr)
        return 2
    app = _app()
    try:
        result = outbox_ops.revive(app.engine, event_ids=ids, all_dead=args.all_dead, operator=args.operator,
                                   reason=args.reason)
    finally:
        app.dispose()
    if not result.applied:
        for line in result.lines():
            print(f"msgx outbox: {line}", file=sys.stderr)
        print(f"audit {result.audit_id}: refused", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    print(f"audit {result.audit_id}")
    return 0


# --- archive (US-11) ---------------------------------------------------------------------------------
def cmd_archive(args: argparse.Namespace) -> int:
    import getpass

    from msgx_engine.config import parse_duration

    older_than = parse_duration(args.older_than, name="--older-than") if args.older_than else None
    app = _app()
    try:
        app.check_ready()
        policy = app.archive_policy(older_than, batch=args.batch)
        report = app.archiver().run(policy, dry_run=args.dry_run, operator=args.operator or getpass.getuser(),
                                    reason=f"msgx archive --older-than {args.older_than or 'MSGX_ARCHIVE_AFTER'}")
    finally:
        app.dispose()
    print("\n".join(report.lines()))
    if report.audit_id is not None:
        print(f"audit {report.audit_id}")
    return 0


# --- recover (a state database restored from an older backup) ----------------------------------
def cmd_recover(args: argparse.Namespace) -> int:
    from msgx_engine.operations.recover import RecoverBusy, RecoverRefused, find_lost, recover
    from msgx_engine.pipeline.pump import PumpBusy, PumpOptions

    if _settings().shadow:
        raise ConfigError("msgx recover finds lost work by production's mailbox marks; a shadow instance "
                          "(MSGX_MODE=shadow) reads the mailbox by id and has no marks of its own to lose")
    app = _app()
    try:
        app.check_ready()
        if not args.apply:
            with app.engine.connect() as conn:
                lost = find_lost(conn, app.mailbox)
            print(lost.describe())
            if lost.ids:
                print("to replay them: msgx recover --apply --operator NAME --reason TEXT")
            return 0
        if not _signed(args):
            print("msgx recover: --apply needs --operator NAME and --reason TEXT", file=sys.stderr)
            return 2
        def rebuild() -> int:
            return app.rebuild_projection() or 0

        try:
            result = recover(app.engine, app.mailbox, operator=args.operator, reason=args.reason,
                             now=app.clock.now(), replay=lambda: app.pump(PumpOptions()).run(),
                             rebuild=rebuild if app.settings.redis_url else None,
                             published=_topics_published(app.settings))
        except (RecoverBusy, PumpBusy) as exc:
            print(f"msgx recover: {exc}", file=sys.stderr)
            return 3
        except RecoverRefused as exc:
            print(f"msgx recover: refused, nothing changed: {exc}", file=sys.stderr)
            return 2
    finally:
        app.dispose()
    if not result.registered:
        print(f"{result.lost.describe()}; audit {result.audit_id}")
        return 0
    print(f"recovered {len(result.registered)} message(s) ({result.lost.describe()}); audit {result.audit_id}")
    print(json.dumps(result.outcome, sort_keys=True))
    return 0


def _topics_published(settings: Settings) -> Callable[[], Published] | None:
    """What the production topics show published, for ``msgx recover`` (None: Kafka is not configured)."""
    from msgx_engine.delivery.published import TopicsUnreadable, read_published
    from msgx_engine.operations.recover import topics_unreadable

    bootstrap = settings.kafka_bootstrap
    if not bootstrap:
        return None

    def read() -> Published:
        try:
            return read_published(bootstrap, [settings.topic_msg, settings.topic_schd])
        except TopicsUnreadable as exc:
            raise topics_unreadable(str(exc)) from exc

    return read


def cmd_adopt(args: argparse.Namespace) -> int:
    """An empty state database on a mailbox processed recently is refused (exit 4) as a lost state;
    this records, audited, that it is a first installation taking the processed rows as history."""
    from msgx_engine.operations.recover import AlreadyAdopted, RecoverBusy, adopt
    from msgx_engine.pipeline.pump import PumpBusy

    if not _signed(args):
        print("msgx adopt: needs --operator NAME and --reason TEXT", file=sys.stderr)
        return 2
    app = _app()
    try:
        app.check_ready()
        try:
            result = adopt(app.engine, app.mailbox, operator=args.operator, reason=args.reason)
        except (RecoverBusy, PumpBusy) as exc:
            print(f"msgx adopt: {exc}", file=sys.stderr)
            return 3
        except AlreadyAdopted as exc:
            print(f"msgx adopt: {exc}", file=sys.stderr)
            return 2
    finally:
        app.dispose()
    print(f"adopted the mailbox: rows up to id {result.high_water} are taken as processed before this "
          f"installation; audit {result.audit_id}")
    return 0


def cmd_shadow_start_from(args: argparse.Namespace) -> int:
    """A fresh shadow replays the mailbox from an operator-chosen id, whatever production marked
    (``operations/shadow_start.py``), so a comparison with production is meaningful from the start."""
    from msgx_engine.operations.shadow_start import ShadowStartBusy, ShadowStartRefused, start_from

    if not _signed(args):
        print("msgx shadow start-from: needs --operator NAME and --reason TEXT", file=sys.stderr)
        return 2
    app = _app()
    try:
        app.check_ready()
        try:
            result = start_from(app.engine, app.mailbox, args.id, operator=args.operator, reason=args.reason)
        except ShadowStartBusy as exc:
            print(f"msgx shadow start-from: {exc}", file=sys.stderr)
            return 3
        except ShadowStartRefused as exc:
            print(f"msgx shadow start-from: {exc}", file=sys.stderr)
            return 2
    finally:
        app.dispose()
    print(f"this shadow starts at mailbox id {result.start_id}: every row from there on is read and processed, "
          f"{result.marked_from_start} of them already processed by production; audit {result.audit_id}")
    return 0


# --- cut-over and rollback (go-live) ------------------------------------------------------------
def cmd_cutover(args: argparse.Namespace) -> int:
    """Hand the right to process and mark the mailbox between two installations (``msgx_engine.cutover``):
    what was checked and done on stdout; refused (nothing changed) exit 2, to be run again exit 1."""
    from msgx_engine.cutover.common import Refused, Report, Unfinished
    from msgx_engine.cutover.promote import promote
    from msgx_engine.cutover.resume import resume
    from msgx_engine.cutover.rollback import rollback
    from msgx_engine.cutover.stop import stop_writes

    name = f"msgx cutover {args.cutover_command}"
    if not _signed(args):
        print(f"{name}: needs --operator NAME and --reason TEXT", file=sys.stderr)
        return 2
    app = _app()
    report = Report()
    try:
        app.check_ready()
        signed = {"operator": args.operator, "reason": args.reason, "report": report}
        if args.cutover_command == "stop-writes":
            stop_writes(app, wait_s=args.wait, accept_dead=args.accept_dead, **signed)
        elif args.cutover_command == "promote":
            promote(app, args.from_url, known=args.known, **signed)
        elif args.cutover_command == "resume":
            resume(app, **signed)
        else:
            rollback(app, args.from_url, known=args.known, **signed)
    except (Refused, Unfinished) as exc:
        print("\n".join(report.lines))
        refused = isinstance(exc, Refused)
        print(f"{name}: {'refused, nothing changed' if refused else 'not finished'}: {exc}", file=sys.stderr)
        return 2 if refused else 1
    finally:
        app.dispose()
    print("\n".join(report.lines))
    print(f"audit {report.audit_id}")
    return 0


# --- demo --------------------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    from msgx_engine.demo.run import fix_fault, run_demo, stop_embedded

    if args.stop:
        return stop_embedded(Settings.from_env().home)
    if args.fix_fault:
        return fix_fault(Settings.from_env().home)
    return run_demo(Settings.from_env(), headless=args.headless, port=args.port, seed=args.seed)


# --- entry ------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="msgx", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="load demo messages into the embedded default and run the platform")
    demo.add_argument("--headless", action="store_true", help="run the pump once, print a summary and exit")
    demo.add_argument("--port", type=int, default=3000, help="the Dagster UI's port on 127.0.0.1 (default 3000)")
    demo.add_argument("--stop", action="store_true", help="stop the embedded PostgreSQL server and exit")
    demo.add_argument("--fix-fault", action="store_true",
                      help="the fix step of the demo's rehearsed failure: stop the state database refusing "
                           "the flight's cancellation, then replay the dead letter")
    demo.add_argument("--seed", type=int, help="seed of the generated day (same seed, same messages and counts)")
    demo.set_defaults(func=cmd_demo)

    db = sub.add_parser("db", help="bring msgx's state database schema up to date (upgrade) or back (downgrade)")
    db.add_argument("action", choices=["upgrade", "downgrade"], help="upgrade or downgrade")
    db.add_argument("revision", nargs="?", help="the schema revision to reach (default: the newest for "
                                                "upgrade, none at all for downgrade)")
    db.set_defaults(func=cmd_db)

    mb = sub.add_parser("mailbox", help="a test or demo mailbox: create its tables, put message files in it")
    mb_sub = mb.add_subparsers(dest="action", required=True)
    mb_sub.add_parser("init", help="create cminmsgs/coutmsgs (test or demo databases only)")
    put = mb_sub.add_parser("put", help="insert message files as the AODB adapter does")
    put.add_argument("files", nargs="+", help="message files, one message each")
    mb.set_defaults(func=cmd_mailbox)

    pump = sub.add_parser("pump", help="process the mailbox's messages in order, by hand (as pump_job does)")
    pump.add_argument("--drain", action="store_true", help="process until nothing is processable, then exit 0")
    pump.add_argument("--idle-for", type=float, default=600.0, help="idle-poll seconds before exiting")
    pump.add_argument("--max-runtime", type=float, default=3600.0, help="seconds after which it exits even "
                                                                        "while work remains")
    pump.set_defaults(func=cmd_pump)

    dispatch = sub.add_parser("dispatch", help="deliver released events to Kafka")
    dispatch.add_argument("--drain", action="store_true", help="deliver everything due now, then exit (1 when "
                                                               "events remain undelivered)")
    dispatch.set_defaults(func=cmd_dispatch)

    serve = sub.add_parser("serve", help="serve the HTTP API, /metrics and the health probes")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="the port to listen on (default 8080)")
    serve.add_argument("--allow-public", action="store_true",
                       help="permit a non-loopback bind; needs MSGX_API_TOKEN and either --tls-cert/--tls-key "
                            "or --behind-tls-proxy")
    serve.add_argument("--tls-cert", metavar="FILE",
                       help="serve HTTPS with this PEM certificate (chain), read at start; needs --tls-key")
    serve.add_argument("--tls-key", metavar="FILE",
                       help="the certificate's PEM private key, unencrypted, readable only by this service")
    serve.add_argument("--behind-tls-proxy", action="store_true",
                       help="state that a proxy in front terminates TLS (lets --allow-public run without "
                            "--tls-cert)")
    serve.set_defaults(func=cmd_serve)

    req = sub.add_parser("request", help="requests to the AODB (RQFD day plan, RQRD reference data)")
    req_sub = req.add_subparsers(dest="action", required=True)
    rqfd = req_sub.add_parser("rqfd", help="register a day-plan request (sent by `msgx request track`)")
    rqfd.add_argument("--start", help="window start, YYYY-MM-DD HH:MM[:SS] local (its date is the day)")
    rqfd.add_argument("--end", help="window end, same format (either bound may be omitted, not both)")
    rqrd = req_sub.add_parser("rqrd", help="register a reference-data request")
    rqrd.add_argument("rtype", help="one of the 23 reference types, e.g. GLST")
    req_sub.add_parser("track", help="send pending requests to COUTMSGS and time out overdue ones, once")
    req.set_defaults(func=cmd_request)

    replay = sub.add_parser("replay", help="preview (default) or apply a replay of failed messages (audited)")
    replay.add_argument("--ids", nargs="+", help="mailbox ids (space or comma separated)")
    replay.add_argument("--status", nargs="+", help="DEAD, FAILED or SKIPPED")
    replay.add_argument("--select-reason", action="append", metavar="REASON",
                        help="select by failure reason or error class (exhausted, unsupported, INFRA, ...); "
                             "may be repeated")
    replay.add_argument("--reason", metavar="TEXT", help="with --apply: why you replay (recorded in the audit trail); "
                                                         "never a selection")
    replay.add_argument("--since", help="registered at or after: ISO date-time or a duration back (2h)")
    replay.add_argument("--until", help="registered before: ISO date-time or a duration back")
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--preview", action="store_true", help="show what a replay would do (the default)")
    mode.add_argument("--apply", action="store_true", help="re-queue the selection (all or nothing)")
    replay.add_argument("--operator", help="who applies (recorded in the audit trail)")
    replay.add_argument("--force-stale", metavar="REASON",
                        help="replay even where later messages have changed a flight since (why)")
    replay.set_defaults(func=cmd_replay)

    skip = sub.add_parser("skip", help="end an open message that cannot proceed: it ends SKIPPED with reason "
                                       "operator_skip (recorded in the audit trail)")
    skip.add_argument("msg_id", type=int, metavar="ID", help="the message's mailbox id")
    skip.add_argument("--operator", required=True, help="who ends it (recorded in the audit trail)")
    skip.add_argument("--reason", required=True, help="why it cannot proceed")
    skip.set_defaults(func=cmd_skip)

    ack = sub.add_parser("acknowledge", help="close dead or unsupported messages that will not be replayed: they "
                                             "leave the dead-letter count and are archived normally (recorded "
                                             "in the audit trail)")
    ack.add_argument("ids", nargs="+", metavar="ID", help="mailbox ids (space or comma separated)")
    ack.add_argument("--operator", required=True, help="who closes them (recorded in the audit trail)")
    ack.add_argument("--reason", required=True, help="why they need no replay")
    ack.add_argument("--even-if-replayable", action="store_true",
                     help="close dead letters a replay could fix (DEAD exhausted or missing) too; without it "
                          "they are refused")
    ack.set_defaults(func=cmd_acknowledge)

    ob = sub.add_parser("outbox", help="events waiting for delivery to Kafka and dead events (default); "
                                       "--apply sends dead events again (recorded in the audit trail)")
    ob.add_argument("--json", action="store_true", help="the overview as JSON")
    ob.add_argument("--apply", action="store_true", help="revive the chosen dead events: they are delivered "
                                                         "again, before the later events of their flight")
    ob.add_argument("--ids", nargs="+", metavar="EVENT_ID", help="dead event ids (space or comma separated)")
    ob.add_argument("--all-dead", action="store_true", help="every dead event")
    ob.add_argument("--operator", help="who revives them (recorded in the audit trail)")
    ob.add_argument("--reason", help="why they may be sent now")
    ob.set_defaults(func=cmd_outbox)

    arch = sub.add_parser("archive", help="move finished messages to the archive tables, purge old flights "
                                          "and old snapshot records")
    arch.add_argument("--older-than", help="retention of terminal messages, e.g. 2d (default MSGX_ARCHIVE_AFTER; "
                                           "0s allowed); identity bindings inside MSGX_IDENTITY_WINDOW are kept")
    arch.add_argument("--dry-run", action="store_true", help="print what would be archived or removed")
    arch.add_argument("--batch", type=int, default=1000, help="messages or flights per transaction")
    arch.add_argument("--operator", help="recorded in the audit trail (default: the OS user)")
    arch.set_defaults(func=cmd_archive)

    recover = sub.add_parser("recover", help="preview (default) or replay mailbox rows processed there but unknown "
                                             "to a restored state database (audited)")
    recover.add_argument("--apply", action="store_true",
                         help="register them, replay in id order, rebuild the projection")
    recover.add_argument("--operator", help="who does it (recorded in the audit trail)")
    recover.add_argument("--reason", help="why (with --apply)")
    recover.set_defaults(func=cmd_recover)
    adopt = sub.add_parser("adopt", help="first installation on a mailbox that was processed recently: take its "
                                         "processed rows as history from before this installation (audited)")
    adopt.add_argument("--operator", required=True, help="who does it (recorded in the audit trail)")
    adopt.add_argument("--reason", required=True, help="why")
    adopt.set_defaults(func=cmd_adopt)
    shadow = sub.add_parser("shadow", help="a shadow installation's starting point")
    shadow_sub = shadow.add_subparsers(dest="shadow_command", required=True)
    start = shadow_sub.add_parser(
        "start-from", help="a fresh shadow processes the mailbox from this id on, rows production already "
                           "processed included (audited)",
        description="Run once on a fresh shadow's empty state database, before its pump: the shadow reads and "
                    "processes every mailbox row from ID on, whether production has processed it or not, so its "
                    "flights match production's from the start. Give the first id of the oldest day to compare.")
    start.add_argument("id", type=int, metavar="ID", help="the first mailbox id to process")
    start.add_argument("--operator", required=True, help="who does it (recorded in the audit trail)")
    start.add_argument("--reason", required=True, help="why")
    start.set_defaults(func=cmd_shadow_start_from)
    cutover = sub.add_parser(
        "cutover", help="hand the right to process and mark the mailbox from one installation to another, and "
                        "back (recorded in the audit trail); see docs/runbook.md",
        description="Go-live and its rollback, in three steps: stop-writes on the active installation, promote on "
                    "the shadow taking over, rollback on the previous installation after stop-writes on the "
                    "promoted one; resume calls a cut-over off before any promote. Each prints what it checked "
                    "and did; a refusal changes nothing (exit 2).")
    cut_sub = cutover.add_subparsers(dest="cutover_command", required=True)
    stop = cut_sub.add_parser(
        "stop-writes", help="the active installation stops at a watermark, delivers and marks what it owes, and "
                            "gives up the right; its pumps refuse to run afterwards")
    stop.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                      help="how long to wait for a running pump or dispatcher to stop (default 120)")
    stop.add_argument("--accept-dead", type=int, metavar="N",
                      help="hand over although N events (dead ones and those held behind them, the number "
                           "a refused stop-writes printed) will never be published")
    promote = cut_sub.add_parser(
        "promote", help="run on the shadow with its production configuration: it takes the right over at the "
                        "stopped installation's watermark and goes on from there")
    rollback = cut_sub.add_parser(
        "rollback", help="run on the installation that stopped writes, after stop-writes on the promoted one: it "
                         "applies what that one processed since and takes the right back")
    for each, other in ((promote, "the stopped installation's"), (rollback, "the promoted installation's")):
        each.add_argument("--from", dest="from_url", required=True, metavar="URL",
                          help=f"{other} state database (postgresql+psycopg://…), only read")
        each.add_argument("--known", type=Path, metavar="FILE", help="known-differences file for the comparison "
                          "of the two installations' flights, e.g. deploy/compare/known-differences.yml")
    resume = cut_sub.add_parser(
        "resume", help="the cut-over is called off before any promote: the installation that stopped writes "
                       "takes them back and goes on from its watermark")
    for each in (stop, promote, rollback, resume):
        each.add_argument("--operator", required=True, help="who does it (recorded in the audit trail)")
        each.add_argument("--reason", required=True, help="why")
    cutover.set_defaults(func=cmd_cutover)

    flights = sub.add_parser("flights", help="print current flights as whole-state JSON")
    flights.set_defaults(func=cmd_flights)

    hist = sub.add_parser("history", help="a flight's versions, oldest first: the mailbox message behind each, the "
                                          "fields it changed, and whether its events reached Kafka and Redis")
    hist.add_argument("flid", metavar="FLID", help="the flight's FLID")
    hist.add_argument("--json", action="store_true", help="the same as JSON")
    hist.set_defaults(func=cmd_history)

    report = sub.add_parser("snapshot-report", help="how far msgx's state had drifted from each daily snapshot")
    report.add_argument("--day", type=date.fromisoformat, help="every report of this day (YYYY-MM-DD); "
                        "default: the newest report")
    report.set_defaults(func=cmd_snapshot_report)

    status = sub.add_parser("status", help="is msgx healthy? every check with its cause and the first command to "
                                           "run; exit 0 healthy, 1 a check fails, 2 the database is unreachable",
                            description="One screen without Dagster or Prometheus: every health check (OK, FAILING, "
                                        "or WARN for work waiting for an operator) with its cause, the first command "
                                        "to run and its runbook section (docs/runbook.md), the backlog, the pump, "
                                        "dead letters, the outbox per topic and the newest snapshot of each live day. "
                                        "Exit 0: healthy; 1: a check fails, warnings included; 2: the state database "
                                        "cannot be read or its schema is behind.")
    status.add_argument("--json", action="store_true", help="the same content as JSON, for scripts")
    status.set_defaults(func=cmd_status)

    cmp = sub.add_parser(
        "compare", help="compare this installation's flights with another system's, field by field; exit 0 "
                        "nothing unexplained, 1 unexplained differences, 2 a side cannot be read",
        description="Reads both sides only. The reference is another msgx database (postgresql+psycopg://…), "
                    "a Redis projection hash (redis://…, field FLID, whole-state JSON) or a running service's "
                    "GET /all/flights (http(s)://…; bearer token from MSGX_COMPARE_TOKEN). Compares the live "
                    "days (yesterday, airport time, and later) unless --day is given; STATE_VERSION, msgx's own "
                    "change counter, is not compared. See docs/go-live.md.")
    cmp.add_argument("--against", metavar="REF", help="the reference: a postgresql+psycopg://, "
                     "redis:// or http(s):// URL")
    cmp.add_argument("--day", type=date.fromisoformat, help="compare only this flight day (YYYY-MM-DD)")
    cmp.add_argument("--json", action="store_true", help="print the report as JSON instead of markdown")
    cmp.add_argument("--known", type=Path, metavar="FILE", help="known-differences file (YAML), e.g. "
                     "deploy/compare/known-differences.yml; without it every difference is unexplained")
    cmp.add_argument("--key", metavar="NAME", help="the Redis hash of a redis:// reference (default flightInfo)")
    cmp.add_argument("--summary", action="store_true", help="instead of comparing now: the go-live verdict over "
                     "the comparisons the scheduled compare job recorded (exit 0 pass, 1 fail, 2 unreadable)")
    cmp.add_argument("--since", default="7d", metavar="DURATION", help="with --summary: the window, back from "
                     "now (7d, 48h; default 7d)")
    cmp.set_defaults(func=cmd_compare)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("MSGX_LOG_LEVEL", "WARNING"), format=LOG_FORMAT,
                        handlers=[StderrHandler()])      # a full stderr pipe drops lines, never blocks (OPS-2)
    install_redaction()
    install_mode(_env_mode())
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"msgx: configuration refused: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
