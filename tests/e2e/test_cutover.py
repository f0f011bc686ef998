"""Cut-over and rollback as commands (OPS-4's rehearsed rollback, PRE-1's one holder of the right,
OPS-3's shadow turned production), run as operators run them: ``msgx`` commands (in process) on
two installations with state databases of their own, one MariaDB mailbox, the Kafka-wire broker
(topics of this test's own) and Redis (keys of this test's own).
"""

from __future__ import annotations

import json
from collections import Counter

from msgx_engine.delivery.projection import connect
from msgx_engine.mailbox.lock import MailboxLock
from tests.builders import gtdt
from tests.cutover_support import (  # noqa: F401 - run_as and two are fixtures
    BATCHES,
    Follower,
    both_drain,
    live,
    msg_events,
    ok,
    refused,
    request_and_answer,
    run_as,
    scalar,
    signed,
    two,
    verdict,
)
from tests.e2e.test_shadow_start import state_checksum
from tests.pipeline_support import mailbox_checksum
from tests.snapshot_builders import big_package

OLD = "OLD000001"


def test_ops4_cut_over_and_roll_back_every_row_processed_marked_and_published_once(
        app, two, run_as, kafka_reader, redis_url, tmp_path):  # noqa: F811 - fixtures from tests.cutover_support
    """OPS-4 (a rehearsed rollback), PRE-1, OPS-3, O19, C-23 (decision L16): production (a) has
    processed an older day before its shadow (b) starts from today's first message (``msgx shadow
    start-from``), so b counts event ids and versions from a later point; both process today's
    stream; a stops writes at its watermark W while b has read on past it; b is promoted and goes on:
    it sends a day-plan request (``msgx request rqfd``) and applies the AODB's answer (SCHD/RESP,
    its flight present), and changes a flight of the old day, which only a stores; a rollback before
    b stopped is refused; b stops at W2; a rolls back, applying (W, W2] without publishing it again
    (the answer too, with the same verdict: its flight present), and goes on. Every mailbox row
    ends marked once (no mark ever rewritten); on the production ``msg`` topic every message's
    events appear exactly once, published by the installation that held the right when it was
    processed; both installations compare with 0 unexplained differences; a pump of a stopped
    installation refuses to run; and a consumer that follows docs/delivery.md literally drops no
    change on either topic (the answer's among them) and ends holding every flight's whole state
    as the installation holding the right has it."""
    a, b, b_live = two["a"], two["b"], two["b_live"]
    mailbox = app.mailbox
    mailbox.put_many([big_package(300, day=9, prefix="OLD")])        # an older day, before the shadow
    first = mailbox.put_many(BATCHES[0])
    both_drain(run_as, a)
    ok(run_as(b, *signed("shadow", "start-from", str(first[0]))))
    both_drain(run_as, b)
    second = mailbox.put_many(BATCHES[1])
    both_drain(run_as, a)
    third = mailbox.put_many(BATCHES[2])          # production stops before it; the shadow reads on
    both_drain(run_as, b)

    out = ok(run_as(a, *signed("cutover", "stop-writes")))
    assert f"writes stopped at mailbox id {second[-1]}" in out
    marks_at_stop = mailbox.processed_at([*first, *second, *third])
    assert all(marks_at_stop[i] is not None for i in [*first, *second])
    assert all(marks_at_stop[i] is None for i in third)
    code, _, err = run_as(a, "pump", "--drain")     # the sensor's relaunch stays stopped
    assert code == 3 and "writes are stopped on this installation" in err
    assert mailbox.processed_at(third) == {i: None for i in third}

    out = ok(run_as(b_live, *signed("cutover", "promote", "--from", a["MSGX_DB_URL"])))
    assert f"took the right over at mailbox id {second[-1]}" in out and "0 unexplained" in out
    assert all(v is not None for v in mailbox.processed_at(third).values())     # b marked what it read on
    code, _, _ = run_as(b, "pump", "--drain")       # b's old shadow configuration is refused now
    assert code != 0
    refused(run_as(a, *signed("cutover", "rollback", "--from", b["MSGX_DB_URL"])), "has not stopped writes")
    both_drain(run_as, b_live)
    # b asks for today's 02:00-03:00 (no flight of the demo day there); the AODB's answer lists N02
    answer = request_and_answer(app, run_as, b_live, ("02:00", "03:00"), "N02", "0230")
    fourth = [answer, mailbox.put(gtdt(OLD, (1, "Z1"))), *mailbox.put_many(BATCHES[3])]   # OLD: stored by a only
    both_drain(run_as, b_live)
    assert verdict(b["MSGX_DB_URL"], answer) == "SUCCEEDED:" and "N02" in live(b["MSGX_DB_URL"]).split(",")

    out = ok(run_as(b_live, *signed("cutover", "stop-writes")))
    assert f"writes stopped at mailbox id {fourth[-1]}" in out
    marks_before_rollback = mailbox.processed_at(DAY_IDS := [*first, *second, *third, *fourth])
    known = tmp_path / "known.yaml"       # b never stored the old day: it holds only what b saw of OLD
    known.write_text(f"rules:\n  - field: '*'\n    when: {{flids: [{OLD}]}}\n    reason: a flight of a day "
                     "before the shadow's start\n")
    out = ok(run_as(a, *signed("cutover", "rollback", "--from", b["MSGX_DB_URL"], "--known", str(known))))
    assert f"{len(third) + len(fourth)} row(s) brought over" in out and "0 unexplained" in out
    assert mailbox.processed_at(DAY_IDS) == marks_before_rollback         # the rollback rewrote no mark
    assert verdict(a["MSGX_DB_URL"], answer) == "SUCCEEDED:" and "N02" in live(a["MSGX_DB_URL"]).split(",")
    code, report, _ = run_as(a, "compare", "--against", b["MSGX_DB_URL"], "--known", str(known), "--json")
    assert code == 0 and json.loads(report)["flights"]["compared"] > 50

    ok(run_as(a, "dispatch", "--drain"))
    fifth = [*mailbox.put_many(BATCHES[4]), mailbox.put(gtdt(OLD, (1, "Z2")))]
    both_drain(run_as, a)
    every = [*DAY_IDS, *fifth]
    final = mailbox.processed_at(every)
    assert all(final[i] is not None for i in every)
    assert {i: final[i] for i in [*first, *second]} == {i: marks_at_stop[i] for i in [*first, *second]}
    assert {i: final[i] for i in DAY_IDS} == marks_before_rollback
    assert scalar(a["MSGX_DB_URL"], "SELECT count(*) FROM proc_state WHERE status IN ('PENDING', 'FAILED')") == 0

    held_by_b = set(third) | set(fourth)
    a_events, b_events = msg_events(a["MSGX_DB_URL"]), msg_events(b["MSGX_DB_URL"])
    expected = Counter({i: n for i, n in a_events.items() if i not in held_by_b})
    expected.update({i: n for i, n in b_events.items() if i in held_by_b})
    records = kafka_reader(a["MSGX_KAFKA_BOOTSTRAP"], a["MSGX_TOPIC_MSG"], sum(expected.values()))
    published = Counter(int(r.headers["msg_id"]) for r in records)
    assert published == expected and len(published) > 200
    follower = Follower().consume(kafka_reader, a, sum(expected.values()))
    assert follower.lost == []
    assert follower.holds_projection(redis_url, a["MSGX_REDIS_KEY"]) == []

    redis = connect(redis_url)
    try:
        flights = scalar(a["MSGX_DB_URL"], "SELECT count(*) FROM flight_schd WHERE NOT deleted AND maid IS NULL")
        assert redis.hlen(a["MSGX_REDIS_KEY"]) == flights > 50
    finally:
        redis.close()
    actions = scalar(a["MSGX_DB_URL"], "SELECT string_agg(action, ',' ORDER BY audit_id) FROM operator_audit")
    assert actions == "cutover_stop_writes,cutover_rollback"
    assert scalar(b["MSGX_DB_URL"], "SELECT string_agg(action, ',' ORDER BY audit_id) FROM operator_audit") == \
        "shadow_start_from,cutover_promote,cutover_stop_writes"


def test_ops4_promote_is_refused_while_the_candidate_is_behind_the_watermark(app, two, run_as):  # noqa: F811
    """OPS-4, PRE-1, OPS-3: the shadow has read only the first batch when production stops after the
    second: promote refuses (exit 2) and changes nothing in either state database or the mailbox."""
    a, b, b_live = two["a"], two["b"], two["b_live"]
    first = app.mailbox.put_many(BATCHES[0])
    ok(run_as(b, *signed("shadow", "start-from", str(first[0]))))
    ok(run_as(b, "pump", "--drain"))
    second = app.mailbox.put_many(BATCHES[1])
    both_drain(run_as, a)
    ok(run_as(a, *signed("cutover", "stop-writes")))
    before = (state_checksum(a["MSGX_DB_URL"]), state_checksum(b["MSGX_DB_URL"]), mailbox_checksum(app.mailbox.engine))
    err = refused(run_as(b_live, *signed("cutover", "promote", "--from", a["MSGX_DB_URL"])), "behind")
    assert f"up to id {first[-1]}" in err and f"watermark {second[-1]}" in err
    assert (state_checksum(a["MSGX_DB_URL"]), state_checksum(b["MSGX_DB_URL"]),
            mailbox_checksum(app.mailbox.engine)) == before


def test_ops4_stop_writes_is_refused_while_a_second_installation_holds_the_mailbox(
        app, two, run_as):  # noqa: F811
    """PRE-1, OPS-4: another installation's pump holds the mailbox lock: stop-writes refuses (exit 2),
    naming it, and nothing changes; a shadow has no writes to stop (exit 2)."""
    a = two["a"]
    app.mailbox.put_many(BATCHES[0])
    both_drain(run_as, a)
    before = (state_checksum(a["MSGX_DB_URL"]), mailbox_checksum(app.mailbox.engine))
    other = MailboxLock(a["MSGX_MAILBOX_URL"])
    other.acquire()
    try:
        refused(run_as(a, *signed("cutover", "stop-writes")), "another msgx installation")
    finally:
        other.dispose()
    refused(run_as(two["b"], *signed("cutover", "stop-writes")), "is a shadow")
    assert (state_checksum(a["MSGX_DB_URL"]), mailbox_checksum(app.mailbox.engine)) == before


def test_o19_promote_and_rollback_refuse_when_the_other_installation_cannot_be_read(app, two, run_as):  # noqa: F811
    """O19, OPS-4: what the other installation published is read from its state database; when
    ``--from`` names one that cannot be read, promote and rollback refuse (exit 2) saying so, and
    neither state database changes."""
    a, b, b_live = two["a"], two["b"], two["b_live"]
    first = app.mailbox.put_many(BATCHES[0])
    both_drain(run_as, a)
    ok(run_as(b, *signed("shadow", "start-from", str(first[0]))))
    ok(run_as(b, "pump", "--drain"))
    missing = a["MSGX_DB_URL"].rsplit("/", 1)[0] + "/msgx_no_such_state_database"
    before = (state_checksum(a["MSGX_DB_URL"]), state_checksum(b["MSGX_DB_URL"]))
    for env in (b_live, a):
        command = "promote" if env is b_live else "rollback"
        err = refused(run_as(env, *signed("cutover", command, "--from", missing)), "cannot be read")
        assert "msgx_no_such_state_database" in err and "check --from" in err
    assert (state_checksum(a["MSGX_DB_URL"]), state_checksum(b["MSGX_DB_URL"])) == before
