"""``msgx compare`` against real references: a second msgx PostgreSQL database, a Redis projection
hash, and a running service's ``GET /all/flights`` over a socket. Each class of difference found and
classified, a known-difference rule with its hit count and an unused rule listed, exit 0/1/2, and
both sides byte-for-byte unchanged (OPS-4's parallel run reads, it never writes)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from types import MappingProxyType

import psycopg
import pytest
import uvicorn
from sqlalchemy import text

from msgx_engine.compare.run import live_since
from msgx_engine.db import make_engine
from msgx_engine.delivery.projection import Projection, connect
from msgx_engine.http.app import create_app
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.state.model import FlightState, freeze_entry
from msgx_engine.store.flights import FlightRepository
from tests.private_servers import free_port, wait_for

TODAY = datetime.now(LOCAL_TZ).date()
OLD_DAY = live_since() - timedelta(days=3)     # before the live days


def flight(flid: str, fday=TODAY, version: int = 1, **fields) -> FlightState:
    values = {k: (tuple(freeze_entry(e) for e in v) if isinstance(v, list) else v) for k, v in fields.items()}
    return FlightState(flid=flid, fields=MappingProxyType(dict(sorted(values.items()))), fday=fday,
                       state_version=version)


def day(n: int = 30, *, version: int = 1) -> list[FlightState]:
    return [flight(f"F{i}", version=version, FLNO=f"CA{i}", MVIN="A" if i % 2 else "D",
                   GTDT=[{"GTNO": "1", "GATE": f"A{i % 7}", "GTYP": "D"}]) for i in range(n)]


def persist(url: str, states: list[FlightState]) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        FlightRepository(conn).persist_next_states(states)
    engine.dispose()


def checksum(url: str) -> dict[str, str]:
    """Every table of the database, as an md5 of its rows: what 'nothing written' means."""
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")]
        return {t: conn.execute(f'SELECT count(*) || \':\' || coalesce(md5(string_agg(t::text, \',\' '
                                f'ORDER BY t::text)), \'\') FROM "{t}" t').fetchone()[0] for t in tables}


@pytest.fixture
def reference(pg_dbs) -> str:
    """A second msgx installation's state database."""
    return pg_dbs.fresh()


def test_identical_installations_pass_and_nothing_is_written(settings, reference, cli_run):
    """OPS-4: two installations holding the same flights (through different histories: other
    STATE_VERSIONs) compare equal, exit 0; neither database changes."""
    persist(settings.db_url, day(version=3) + [flight("OLD", fday=OLD_DAY, FLNO="X")])
    persist(reference, day(version=1) + [flight("OLD", fday=OLD_DAY, FLNO="Y")])
    before = checksum(settings.db_url), checksum(reference)
    code, out, err = cli_run("compare", "--against", reference, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "pass" and doc["flights"]["compared"] == 30 and doc["flights"]["equal"] == 30
    assert doc["differences"]["total"] == 0 and doc["not_compared"] == ["STATE_VERSION"]
    code, out, _ = cli_run("compare", "--against", reference, "--day", OLD_DAY.isoformat())
    assert code == 1 and "| OLD | FLNO | field differs | X | Y |" in out
    assert (checksum(settings.db_url), checksum(reference)) == before


def test_each_class_and_the_known_differences(settings, reference, cli_run, tmp_path):
    """OPS-4: a flight missing here, one missing there, a field that differs (both values shown),
    and a difference a known-differences rule explains, with its hit count; a rule that explains
    nothing is listed. Exit 1 while anything is unexplained, 0 once rules explain the rest."""
    here, there = day(), day()
    here[3] = flight("F3", FLNO="CA3", MVIN="A", GTDT=[{"GTNO": "1", "GATE": "B9", "GTYP": "D"}])
    there[5] = flight("F5", FLNO="CA5", MVIN="A", GTDT=[{"GTNO": "1", "GATE": "A5", "GTYP": "D"}], REMC="late")
    there[7] = flight("F7", FLNO="CA7", MVIN="A", GTDT=[{"GTNO": "1", "GATE": "A0", "GTYP": "D"}], REMC="late")
    persist(settings.db_url, here + [flight("ONLY_HERE", FLNO="X1")])
    persist(reference, there + [flight("ONLY_THERE", FLNO="X2")])
    known = tmp_path / "known.yml"
    known.write_text(
        "rules:\n"
        "  - field: REMC\n    when: {here: absent, flight: {MVIN: A}}\n"
        "    reason: the reference keeps remarks of arrivals\n"
        "  - field: STND\n    reason: stands agree in this test\n", encoding="utf-8")
    code, out, err = cli_run("compare", "--against", reference, "--known", str(known), "--json")
    assert code == 1, err
    doc = json.loads(out)
    assert doc["differences"]["by_class"] == {"missing_here": 1, "missing_there": 1, "differs": 1, "explained": 2}
    assert doc["differences"]["examples"]["missing_here"] == ["ONLY_THERE"]
    assert doc["differences"]["examples"]["missing_there"] == ["ONLY_HERE"]
    assert doc["fields"]["GTDT"]["examples"] == ["F3"]
    assert {"flid": "F3", "field": "GTDT", "class": "differs", "here": [{"GATE": "B9", "GTNO": "1", "GTYP": "D"}],
            "there": [{"GATE": "A3", "GTNO": "1", "GTYP": "D"}]} in doc["unexplained_examples"]
    assert doc["fields"]["REMC"] == {"total": 2, "unexplained": 0, "classes": {"explained": 2},
                                     "examples": ["F5", "F7"]}
    assert [(r["rule"], r["hits"]) for r in doc["rules"]] == [(1, 2), (2, 0)]
    assert doc["unused_rules"] == [{"rule": 2, "field": "STND", "reason": "stands agree in this test"}]
    code, text_out, _ = cli_run("compare", "--against", reference, "--known", str(known))
    assert code == 1 and "**FAIL: 3 unexplained difference(s) in 3 flight(s)**" in text_out
    assert "Rules that explained nothing (still needed?): 2 (`STND`)" in text_out

    known.write_text(known.read_text(encoding="utf-8") +
                     "  - field: \"*\"\n    when: {flids: [ONLY_HERE, ONLY_THERE]}\n    reason: planted\n"
                     "  - field: GTDT\n    when: {here: [{GATE: B9, GTNO: \"1\", GTYP: D}]}\n    reason: planted\n",
                     encoding="utf-8")
    code, out, _ = cli_run("compare", "--against", reference, "--known", str(known), "--json")
    assert code == 0 and json.loads(out)["verdict"] == "pass"


def test_redis_reference(settings, reference, cli_run, redis_url):
    """OPS-4: the reference is a projection hash (field FLID, whole-state JSON), named by --key;
    the hash is unchanged afterwards; a key that does not exist is a side that cannot be read (2)."""
    persist(settings.db_url, day())
    persist(reference, day()[:-1] + [flight("F29", FLNO="MU29", MVIN="A",
                                            GTDT=[{"GTNO": "1", "GATE": "A1", "GTYP": "D"}])])
    key = f"compare_test_{uuid.uuid4().hex[:8]}"
    client = connect(redis_url)
    try:
        Projection(client, key).rebuild(make_engine(reference))
        dumped = client.dump(key)
        code, out, err = cli_run("compare", "--against", redis_url, "--key", key, "--json")
        assert code == 1, err
        doc = json.loads(out)
        assert doc["there"].endswith(f"hash {key}") and doc["flights"]["there"] == 30
        assert [(d["flid"], d["field"], d["here"], d["there"]) for d in doc["unexplained_examples"]] == [
            ("F29", "FLNO", "CA29", "MU29")]
        assert client.dump(key) == dumped
        code, _, err = cli_run("compare", "--against", redis_url, "--key", f"{key}_absent")
        assert code == 2 and "does not exist" in err and err.count("\n") == 1
    finally:
        client.delete(key, f"{key}:version")
        client.close()


@pytest.fixture
def service(reference, settings) -> Iterator[str]:
    """The reference installation's HTTP API on a real socket, with a bearer token."""
    engine = make_engine(reference)
    mailbox = Mailbox(settings.mailbox_url)      # GET /all/flights reads only the state database
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(mailbox=mailbox, engine=engine, api_token="s3cret"),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the HTTP server", 15)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(15)
    engine.dispose()
    mailbox.dispose()


def test_http_reference(settings, reference, service, cli_run, monkeypatch):
    """OPS-4: the reference is a running service's GET /all/flights; the bearer token comes from
    MSGX_COMPARE_TOKEN; without it the side cannot be read (exit 2, one line naming the variable)."""
    persist(settings.db_url, day())
    persist(reference, day())
    code, _, err = cli_run("compare", "--against", service)
    assert code == 2 and "401" in err and "MSGX_COMPARE_TOKEN" in err and err.count("\n") == 1
    monkeypatch.setenv("MSGX_COMPARE_TOKEN", "s3cret")
    code, out, err = cli_run("compare", "--against", service + "/all/flights", "--json")
    assert code == 0, err
    assert json.loads(out)["flights"] == {"here": 30, "there": 30, "compared": 30, "equal": 30,
                                          "with_unexplained": 0}


def test_unreadable_sides_exit_2(settings, cli_run, tmp_path):
    """A side that cannot be read is exit 2 with the reason on one line, never an empty side."""
    code, _, err = cli_run("compare", "--against", "postgresql+psycopg://postgres:pw@127.0.0.1:1/none")
    assert code == 2 and err.startswith("msgx compare: reference unreadable:") and "pw" not in err
    code, _, err = cli_run("compare", "--against", "ftp://example/x")
    assert code == 2 and "is not a postgresql+psycopg://, redis:// or http(s):// URL" in err
    bad = tmp_path / "known.yml"
    bad.write_text("rules:\n  - field: FLNO\n", encoding="utf-8")
    code, _, err = cli_run("compare", "--against", settings.db_url, "--known", str(bad))
    assert code == 2 and "rule 1: reason is missing" in err
    with make_engine(settings.db_url).begin() as conn:
        conn.execute(text("DROP TABLE flight_schd CASCADE"))
    code, _, err = cli_run("compare", "--against", settings.db_url)
    assert code == 2 and "unreadable" in err
