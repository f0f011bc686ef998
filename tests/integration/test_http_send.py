"""POST /cminmsgs/send in-process: media types, encodings, refusals, commit-before-success, and the
path from the endpoint through intake and the pump (US-02 AC1-AC3, C-28, INV-2b)."""

from __future__ import annotations

import codecs

import pymysql
import pytest
from sqlalchemy import make_url, select
from starlette.testclient import TestClient

from msgx_engine.http.app import create_app
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store.tables import detail_tables, proc_state
from tests.builders import envelope, gtdt
from tests.http_support import assert_refused, client_for, inbox_count

flight_gate = detail_tables["flight_gate"]


def raw_row(mailbox_url: str, msg_id: int) -> dict:
    """Read the row over a brand-new connection: proves the insert was committed, not just sent."""
    u = make_url(mailbox_url)
    conn = pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, charset="utf8mb4", cursorclass=pymysql.cursors.DictCursor)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM cminmsgs WHERE CMINMSGS_ID = %s", (msg_id,))
            return cur.fetchone()
    finally:
        conn.close()


@pytest.mark.parametrize("ctype", ["text/xml", "application/xml", "text/plain", "text/xml; charset=UTF-8",
                                   'Application/XML; Charset="utf-8"', "text/plain;charset=utf8"])
def test_accepted_media_types_insert_and_return_committed_id(app, settings, ctype):
    """US-02 AC1/AC2, C-28: the three media types (charset optional, UTF-8 by default) insert one row
    as the AODB adapter does (status VALID, received time set, unprocessed); the returned id is the
    committed row, visible on a fresh connection."""
    body = envelope("FLOP", "GTDT", "\t<FLOP><FLID>7</FLID></FLOP>\n")
    resp = client_for(app).post("/cminmsgs/send", content=body.encode(), headers={"Content-Type": ctype})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    doc = resp.json()
    assert doc["is_success"] is True and set(doc) == {"is_success", "body"}
    assert isinstance(doc["body"], int)
    row = raw_row(settings.mailbox_url, doc["body"])
    assert row["CMINMSGS_CLOB_MSG"] == body
    assert row["CMINMSGS_STATUS"] == "VALID"
    assert row["CMINMSGS_DATE_RECEIVED"] is not None and row["CMINMSGS_DATE_PROCESSED"] is None
    assert inbox_count(app) == 1


def test_success_does_not_process_the_message(app):
    """US-02 AC3, C-28: success only promises the mailbox row: nothing is registered or processed."""
    resp = client_for(app).post("/cminmsgs/send", content=gtdt("9", (1, "A1")).encode(),
                                headers={"Content-Type": "text/xml"})
    assert resp.status_code == 200
    with app.engine.connect() as conn:
        assert conn.execute(select(proc_state)).fetchall() == []
    assert app.mailbox.processed_at([resp.json()["body"]]) == {resp.json()["body"]: None}


def test_non_ascii_text_round_trips_as_utf8(app, settings):
    """US-02 AC1: default UTF-8; Chinese remarks are stored unchanged."""
    body = envelope("FLOP", "REMC", "\t<FLOP><FLID>8</FLID><REMC>航班延误，请注意</REMC></FLOP>\n")
    resp = client_for(app).post("/cminmsgs/send", content=body.encode("utf-8"),
                                headers={"Content-Type": "application/xml"})
    assert resp.status_code == 200, resp.text
    assert raw_row(settings.mailbox_url, resp.json()["body"])["CMINMSGS_CLOB_MSG"] == body


def test_well_formed_but_unknown_type_is_accepted_for_the_pipeline_to_classify(app):
    """US-02 (HTTP 基础格式校验不替代 US-03 的业务解码): only well-formedness is checked here."""
    resp = client_for(app).post("/cminmsgs/send", content=b"<NOTSIS><X/></NOTSIS>",
                                headers={"Content-Type": "text/xml"})
    assert resp.status_code == 200 and inbox_count(app) == 1


@pytest.mark.parametrize("ctype", [None, "application/json", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", "text/html", "xml"])
def test_other_media_types_are_415(app, ctype):
    """US-02 AC1: only text/xml, application/xml, text/plain; anything else (or none) is 415."""
    headers = {"Content-Type": ctype} if ctype else {}
    client = client_for(app)
    req = client.build_request("POST", "/cminmsgs/send", content=b"<MSG/>", headers=headers)
    if ctype is None:
        req.headers.pop("content-type", None)
    assert_refused(client.send(req), 415, "unsupported_media_type")
    assert inbox_count(app) == 0


@pytest.mark.parametrize("ctype", ["text/xml; charset=ISO-8859-1", "text/xml; charset=gbk",
                                   "application/xml; charset=utf-16"])
def test_non_utf8_charset_parameter_is_415(app, ctype):
    """US-02 AC1 / Q3: the body is UTF-8; a declared other charset is refused, not guessed."""
    resp = client_for(app).post("/cminmsgs/send", content=b"<MSG/>", headers={"Content-Type": ctype})
    assert_refused(resp, 415, "unsupported_charset")
    assert inbox_count(app) == 0


def test_xml_declaration_encoding_is_ignored_and_the_text_is_stored_as_sent(app, settings):
    """Decisions F8: a GBK declaration over UTF-8 bytes is not a reason to refuse
    (the declaration is ignored on both paths); the characters are stored exactly as sent."""
    body = '<?xml version="1.0" encoding="GBK"?><MSG><A>航班</A></MSG>'
    resp = client_for(app).post("/cminmsgs/send", content=body.encode(), headers={"Content-Type": "text/xml"})
    assert resp.status_code == 200, resp.text
    assert raw_row(settings.mailbox_url, resp.json()["body"])["CMINMSGS_CLOB_MSG"] == body


@pytest.mark.parametrize(("body", "code"), [
    (b"", "empty_body"),
    (b"  \r\n\t ", "empty_body"),
    (codecs.BOM_UTF8, "empty_body"),
    (b"hello", "malformed_xml"),
    (b"<MSG><META></MSG>", "malformed_xml"),
    (b"<MSG>&undefined;</MSG>", "malformed_xml"),
    (b"<MSG/><MSG/>", "malformed_xml"),
    (b"".join(b"<a>" for _ in range(40)) + b"".join(b"</a>" for _ in range(40)), "malformed_xml"),
])
def test_empty_and_malformed_bodies_are_400_and_insert_nothing(app, body, code):
    """US-02 AC1, C-28: empty (also whitespace or a lone BOM) and not-well-formed XML (including
    undefined entities and excessive nesting) are refused with their code; nothing lands."""
    resp = client_for(app).post("/cminmsgs/send", content=body, headers={"Content-Type": "text/xml"})
    assert_refused(resp, 400, code)
    assert inbox_count(app) == 0


def test_bad_content_length_is_400(app):
    """US-02 AC1: a Content-Length that is not a number is refused before reading (direct ASGI: httpx
    would not send such a header)."""
    from tests.http_support import call_asgi

    asgi = create_app(mailbox=app.mailbox, engine=app.engine)
    res = call_asgi(asgi, "/cminmsgs/send", {"Content-Type": "text/xml", "Content-Length": "-5"}, [b"<MSG/>"])
    assert res.status == 400 and b'"bad_content_length"' in res.body and res.pulled == 0
    assert inbox_count(app) == 0


def test_mailbox_unavailable_is_503_never_success(app):
    """US-02 AC2: an insert the mailbox did not confirm is never answered as success."""
    dead = Mailbox("mysql+pymysql://root@127.0.0.1:1/nowhere")
    client = TestClient(create_app(mailbox=dead, engine=app.engine))
    try:
        resp = client.post("/cminmsgs/send", content=b"<MSG/>", headers={"Content-Type": "text/xml"})
    finally:
        dead.dispose()
    assert_refused(resp, 503, "mailbox_unavailable")
    assert inbox_count(app) == 0


def test_message_sent_through_the_endpoint_is_taken_in_and_processed_by_the_pump(app):
    """US-02 AC3, C-28, INV-2b: a row written by the endpoint is found by intake like any AODB row,
    processed to SUCCEEDED, marked processed, and its state is then served by GET /all/flights."""
    client = client_for(app)
    resp = client.post("/cminmsgs/send", content=gtdt("4711", (1, "A1"), (2, "B2", "I")).encode(),
                       headers={"Content-Type": "application/xml"})
    assert resp.status_code == 200, resp.text
    msg_id = resp.json()["body"]

    app.pump(PumpOptions()).run()

    with app.engine.connect() as conn:
        status = conn.execute(select(proc_state.c.status).where(proc_state.c.msg_id == msg_id)).scalar_one()
        gates = conn.execute(select(flight_gate.c.gate, flight_gate.c.gtyp).where(flight_gate.c.flid == "4711")
                             .order_by(flight_gate.c.ordinal)).fetchall()
    assert status == "SUCCEEDED"
    assert [tuple(g) for g in gates] == [("A1", "D"), ("B2", "I")]
    assert app.mailbox.processed_at([msg_id])[msg_id] is not None
    flights = client.get("/all/flights").json()
    assert [f["FLID"] for f in flights] == ["4711"]
    assert [g["GATE"] for g in flights[0]["GTDT"]] == ["A1", "B2"]


def test_unknown_paths_and_methods_answer_the_error_json(app):
    """Q3: every refusal has the same JSON shape, including routing errors."""
    client = client_for(app)
    assert_refused(client.get("/nope"), 404, "not_found")
    resp = client.get("/cminmsgs/send")
    assert_refused(resp, 405, "method_not_allowed")
    assert "POST" in resp.headers["allow"]
    assert_refused(client.post("/all/flights"), 405, "method_not_allowed")


def test_ops3_shadow_instance_refuses_to_insert_into_the_mailbox(app, settings):
    """OPS-3, D29: POST /cminmsgs/send on a shadow instance (read-only mailbox) answers 409
    shadow_mode after the usual checks and inserts nothing."""
    shadow = Mailbox(settings.mailbox_url, read_only=True)
    try:
        client = TestClient(create_app(mailbox=shadow, engine=app.engine))
        resp = client.post("/cminmsgs/send", content=gtdt("HS1", (1, "A1")).encode(),
                           headers={"Content-Type": "text/xml"})
        assert_refused(resp, 409, "shadow_mode")
        assert "never writes the mailbox" in resp.json()["err_msg"]
        assert inbox_count(app) == 0
    finally:
        shadow.dispose()
