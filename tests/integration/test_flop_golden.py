"""Golden five-face cases (US-05 AC2): input message + prior state -> next state, ``msg`` event,
``schd`` payload, terminal status, through the real pipeline (PostgreSQL + MariaDB).

Each ``tests/golden/<STYP>/<case>.case.json`` (authored by ``tests/golden/make_cases.py``) names
its prior flights and messages; ``<case>.expected.json`` holds the four output faces. The cases
cover present / absent / empty / zero-sequence / duplicate / unknown flight per subtype, every
FLOP sample of sis-samples, FDEL with the code-share cascade (INV-21/22, C-25) and SCHD-ADFT
(FS §4.2, INV-29). ``MSGX_GOLDEN_REGEN=1`` rewrites the generated expected files: review the diff.

Generated faces are written by the code under test, so they pin behaviour. Each subtype also has
hand-written cases (``hand_<name>.*``, ``"written_by": "hand"``): their expected faces were typed
from the spec and the field catalogue, hold only what the message should change (plus the state
version and the ``msg`` events), and are never rewritten by ``MSGX_GOLDEN_REGEN``
(``test_hand_written_case``; ``tests/golden/README.md``).

One database pair serves the module; between cases every table the pipeline writes is emptied
and the mailbox is truncated, so message ids restart at 1 and the faces are deterministic.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import delete, text

from msgx_engine.app import App
from msgx_engine.clock import ManualClock
from msgx_engine.config import Settings
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.state.serialize import state_document, state_from_json
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.tables import (
    backfill_todo,
    detail_tables,
    flight_schd,
    intake_gap,
    msg_event,
    proc_state,
    proc_state_hst,
    ref_load,
    ref_master,
    schd_gen,
    schd_gen_flid,
    schd_gen_run,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
HAND_PREFIX = "hand_"
ALL_CASES = sorted(GOLDEN.glob("*/*.case.json"))
CASES = [p for p in ALL_CASES if not p.name.startswith(HAND_PREFIX)]
HAND_CASES = [p for p in ALL_CASES if p.name.startswith(HAND_PREFIX)]
REGEN = os.environ.get("MSGX_GOLDEN_REGEN") == "1"
SEQN_BASE = 880000


@pytest.fixture(scope="module")
def golden_app(pg_dbs, mysql_dbs, tmp_path_factory):
    settings = Settings(db_url=pg_dbs.fresh(), mailbox_url=mysql_dbs.fresh(), kafka_bootstrap=None,
                        redis_url=None, home=tmp_path_factory.mktemp("golden"), gap_grace_s=5.0)
    app = App.from_settings(settings, clock=ManualClock())
    yield app
    app.dispose()


def _reset(app: App) -> None:
    with app.engine.begin() as conn:
        for table in (*detail_tables.values(), flight_schd, msg_event, proc_state, proc_state_hst,
                      backfill_todo, intake_gap, ref_master, ref_load, schd_gen, schd_gen_flid, schd_gen_run):
            conn.execute(delete(table))
    with app.mailbox.engine.connect() as conn:
        conn.execute(text("TRUNCATE TABLE cminmsgs"))


def _expected_path(case_path: Path) -> Path:
    return case_path.with_name(case_path.name.replace(".case.json", ".expected.json"))


def _run(app: App, case_path: Path, case: dict, samples: Path) -> dict:
    _reset(app)
    _seed(app, case["prior"])
    for body in _messages(case_path, case["messages"], samples):
        app.mailbox.put(body)
    app.pump(PumpOptions()).run()
    faces = _faces(app)
    assert faces.pop("released"), "every event of a terminal message is released (US-03 AC4)"
    return faces


def _seed(app: App, prior: list[dict]) -> None:
    states = []
    for doc in prior:
        doc = dict(doc)
        deleted = doc.pop("DELETED", False)
        states.append(replace(state_from_json(json.dumps(doc)), deleted=deleted))
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states(states)


def _messages(case_path: Path, refs: list[dict], samples: Path) -> list[str]:
    texts: list[str] = []
    for n, ref in enumerate(refs):
        if "again" in ref:
            texts.append(texts[ref["again"]])
            continue
        source = samples / ref["sample"] if "sample" in ref else case_path.parent / ref["file"]
        body = source.read_text(encoding="utf-8")
        if "styp" in ref:
            body = re.sub(r"<STYP>\w+</STYP>", f"<STYP>{ref['styp']}</STYP>", body, count=1)
        texts.append(re.sub(r"<SEQN>\s*\d+\s*</SEQN>", f"<SEQN>{SEQN_BASE + n}</SEQN>", body, count=1))
    return texts


def _faces(app: App) -> dict:
    with app.engine.connect() as conn:
        status = [[r.status, r.reason] for r in conn.execute(
            proc_state.select().order_by(proc_state.c.msg_id))]
        events = conn.execute(msg_event.select().order_by(msg_event.c.event_id)).fetchall()
        flids = [r[0] for r in conn.execute(flight_schd.select().with_only_columns(flight_schd.c.flid))]
        states = FlightRepository(conn).load(flids)
    flights = {}
    for flid in sorted(states):
        s = states[flid]
        flights[flid] = {**state_document(s), "DELETED": s.deleted, "LAST_MESSAGE_ID": s.last_message_id}
    return {
        "status": status,
        "flights": flights,
        "msg": [json.loads(e.payload) for e in events if e.topic == "msg"],
        "schd": [json.loads(e.payload) for e in events if e.topic == "schd"],
        "released": all(e.released_at is not None for e in events),
    }


@pytest.mark.parametrize("case_path", CASES, ids=[f"{p.parent.name}/{p.name[:-10]}" for p in CASES])
def test_golden_case(case_path: Path, golden_app: App, samples: Path) -> None:
    """US-05 AC2 (five faces per subtype); the spec IDs each case proves are in its ``spec`` list.

    Regenerated by ``MSGX_GOLDEN_REGEN=1``; hand-written cases are not in this list (``HAND_CASES``).
    """
    case = json.loads(case_path.read_text(encoding="utf-8"))
    assert case.get("written_by") != "hand", f"{case_path.name}: a hand-written case must be named {HAND_PREFIX}*"
    faces = _run(golden_app, case_path, case, samples)
    expected_path = _expected_path(case_path)
    if REGEN:
        expected_path.write_text(json.dumps(faces, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
                                 encoding="utf-8")
    assert expected_path.exists(), f"no expected faces for {case_path.name}: run with MSGX_GOLDEN_REGEN=1"
    expected = json.loads(expected_path.read_text(encoding="utf-8"))
    assert faces["status"] == expected["status"], case["doc"]
    assert faces["flights"] == expected["flights"], case["doc"]
    assert faces["msg"] == expected["msg"], case["doc"]
    assert faces["schd"] == expected["schd"], case["doc"]


def _prior_document(doc: dict) -> dict:
    """A prior flight as its state document would read it back (the ``DELETED`` flag defaults to false)."""
    return {"DELETED": False, **doc}


@pytest.mark.parametrize("case_path", HAND_CASES, ids=[f"{p.parent.name}/{p.name[:-10]}" for p in HAND_CASES])
def test_hand_written_case(case_path: Path, golden_app: App, samples: Path) -> None:
    """US-05 AC2: a face written by hand from the spec and the catalogue (never by ``MSGX_GOLDEN_REGEN``).

    The expected file names, per flight, only the keys the message must change (``null`` = cleared:
    absent from the state and from ``schd``, ``null`` in ``CHANGES``, FS §6.2) and the state version;
    every other key of the prior flight must keep its value (INV-14b). ``msg`` lists the events the
    message must publish (only the fields given are compared), and a flight whose version moves must
    publish its ``schd`` state at that version carrying the changed values.
    """
    case = json.loads(case_path.read_text(encoding="utf-8"))
    expected = json.loads(_expected_path(case_path).read_text(encoding="utf-8"))
    assert case["written_by"] == expected["written_by"] == "hand", case_path.name
    why = expected["why"]
    faces = _run(golden_app, case_path, case, samples)

    assert faces["status"] == expected["status"], why
    priors = {doc["FLID"]: _prior_document(doc) for doc in case["prior"]}
    for flid, changes in expected["flights"].items():
        assert flid in faces["flights"], f"flight {flid} missing: {why}"
        actual = faces["flights"][flid]
        for key, value in changes.items():
            assert actual.get(key) == value, f"{flid}.{key}: {why}"
            if value is None:
                assert key not in actual, f"{flid}.{key} cleared means absent: {why}"
        for key, value in priors.get(flid, {}).items():
            if key not in changes:
                assert actual.get(key) == value, f"{flid}.{key} was not to change: {why}"
    unexpected = set(faces["flights"]) - set(expected["flights"]) - set(priors)
    assert not unexpected, f"flights created that the face does not name: {unexpected}"

    by_flid = {}
    for event in faces["msg"]:
        assert event["FLID"] not in by_flid, f"two msg events for {event['FLID']}: {why}"
        by_flid[event["FLID"]] = event
    assert set(by_flid) == {e["FLID"] for e in expected["msg"]}, why
    for want in expected["msg"]:
        got = by_flid[want["FLID"]]
        assert {k: got.get(k) for k in want} == want, why

    schd = {}
    for payload in faces["schd"]:
        schd[payload["FLID"]] = payload
    for flid, changes in expected["flights"].items():
        # version 0 is FDEL's silent tombstone for a flight never stored: it is never published
        moved = changes["STATE_VERSION"] not in (0, priors.get(flid, {}).get("STATE_VERSION"))
        if not moved:
            assert flid not in schd, f"{flid} did not change, so nothing is published: {why}"
            continue
        assert schd[flid]["STATE_VERSION"] == changes["STATE_VERSION"], why
        if changes.get("DELETED"):
            assert schd[flid].get("DELETED") is True, f"{flid}: a deletion is a tombstone on schd: {why}"
            continue
        for key, value in changes.items():
            if key == "DELETED":
                continue
            if value is None:
                assert key not in schd[flid], f"{flid}.{key}: a clear is a missing key on schd (FS §6.2)"
            else:
                assert schd[flid][key] == value, f"{flid}.{key} on schd: {why}"
