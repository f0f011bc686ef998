"""An answer to a day-plan request reaches the same verdict wherever its row is processed (OPS-3, OPS-4,
C-23; decision L16): the shadow during a parallel run applies production's answer as production
does, and the old installation applies, after a rollback, the answer the promoted one applied.
Run as operators run them: ``msgx`` commands (in process) on two installations with state
databases of their own, one MariaDB mailbox, the broker and Redis (topics and keys of their own).
"""

from __future__ import annotations

import json

from snapshot_builders import dnld, fltr

from tests.cutover_support import (  # noqa: F401 - run_as and two are fixtures
    STAMP,
    both_drain,
    live,
    ok,
    request_and_answer,
    run_as,
    scalar,
    signed,
    two,
    verdict,
)


def day_plan(app) -> int:
    """Today's plan (07:00, 10:00, 15:00) in the mailbox."""
    return app.mailbox.put(dnld(*(fltr(f, f"{STAMP}{t}") for f, t in (("A07", "0700"), ("B10", "1000"),
                                                                       ("C15", "1500")))))


def answer_n10(app, run_as, env) -> int:  # noqa: F811
    """A request for today 08:00-12:00 from ``env``; the answer lists a new 10:30 flight only: B10
    inside the window is deleted."""
    return request_and_answer(app, run_as, env, ("08:00", "12:00"), "N10", "1030")


def unexplained(run_as, env, against: str) -> int:  # noqa: F811
    code, out, err = run_as(env, "compare", "--against", against, "--json")
    report = json.loads(out)
    assert report["flights"]["compared"] >= 3, (code, out, err)
    return int(report["differences"]["unexplained"])


def test_l16_the_shadow_applies_the_answer_to_productions_request(app, two, run_as):  # noqa: F811
    """OPS-3, C-23, D23 (L16): in a parallel run production asks for today 08:00-12:00 and the
    AODB answers; the shadow, which sent nothing, reads the request from COUTMSGS and applies the
    answer with the same window: both end with flights A07, C15 and N10 live and B10 deleted, and
    ``msgx compare`` finds no difference (before, the shadow skipped it as no_request and kept
    B10 without N10: a difference promote had to be told was known). The request it read does not
    make its database look like production's: its pump still starts."""
    a, b = two["a"], two["b"]
    first = day_plan(app)
    ok(run_as(b, *signed("shadow", "start-from", str(first))))
    both_drain(run_as, a)
    both_drain(run_as, b)
    answer = answer_n10(app, run_as, a)
    both_drain(run_as, a)
    both_drain(run_as, b)
    assert verdict(a["MSGX_DB_URL"], answer) == verdict(b["MSGX_DB_URL"], answer) == "SUCCEEDED:"
    assert live(a["MSGX_DB_URL"]) == live(b["MSGX_DB_URL"]) == "A07,C15,N10"
    assert unexplained(run_as, b, a["MSGX_DB_URL"]) == 0
    assert scalar(b["MSGX_DB_URL"], "SELECT string_agg(status || ':' || adopted, ',') FROM req_track") == "DONE:true"
    assert scalar(b["MSGX_DB_URL"], "SELECT count(*) FROM req_track WHERE NOT adopted") == 0
    ok(run_as(b, "pump", "--drain"))      # a request read from the mailbox is not one the shadow sent


def test_l16_an_answer_the_promoted_installation_applied_is_applied_after_rollback(app, two, run_as):  # noqa: F811
    """OPS-4, C-23, D23 (L16): after promote, the promoted installation asks for today 08:00-12:00
    and applies the AODB's answer; it stops writes and the old installation rolls back. The answer
    is brought over with the time the promoted installation registered it (`arrived_at`), and the request it
    answers is read from COUTMSGS: the old installation applies it with the same window, so the
    rollback's comparison finds the two alike (before, it was SKIPPED(no_request) there and the
    rollback stopped on the difference)."""
    a, b, b_live = two["a"], two["b"], two["b_live"]
    first = day_plan(app)
    ok(run_as(b, *signed("shadow", "start-from", str(first))))
    both_drain(run_as, a)
    both_drain(run_as, b)
    ok(run_as(a, *signed("cutover", "stop-writes")))
    ok(run_as(b_live, *signed("cutover", "promote", "--from", a["MSGX_DB_URL"])))
    answer = answer_n10(app, run_as, b_live)
    both_drain(run_as, b_live)
    assert verdict(b["MSGX_DB_URL"], answer) == "SUCCEEDED:" and live(b["MSGX_DB_URL"]) == "A07,C15,N10"
    ok(run_as(b_live, *signed("cutover", "stop-writes")))

    out = ok(run_as(a, *signed("cutover", "rollback", "--from", b["MSGX_DB_URL"])))
    assert "1 row(s) brought over" in out and "0 unexplained" in out
    assert verdict(a["MSGX_DB_URL"], answer) == "SUCCEEDED:" and live(a["MSGX_DB_URL"]) == "A07,C15,N10"
    assert scalar(a["MSGX_DB_URL"], "SELECT arrived_at FROM proc_state WHERE msg_id = :m", m=answer) == \
        scalar(b["MSGX_DB_URL"], "SELECT created_at FROM proc_state WHERE msg_id = :m", m=answer)
    assert unexplained(run_as, a, b["MSGX_DB_URL"]) == 0
