"""`msgx serve` against slow, surplus and malformed clients, over a real socket with the server as
a process: header and body read timeouts, the connection cap, and the error
JSON (US-02 AC3) for every refusal msgx can see. Waits are conditions with a deadline; no test
asserts how long anything took."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.builders import gtdt
from tests.http_support import inbox_count, serve_process

DEADLINE_S = 60.0   # generous: the machine is shared; the server's own timeouts are 2 s here


@dataclass
class Answer:
    status: int
    doc: dict
    headers: dict[str, str]
    closed: bool    # the server hung up after answering


def read_answer(sock: socket.socket, deadline_s: float = DEADLINE_S) -> Answer:
    """Wait (up to the deadline) for the server's answer on ``sock``, then for it to hang up."""
    sock.settimeout(deadline_s)
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    body = resp.read()
    assert resp.getheader("content-type", "").startswith("application/json"), body
    headers = {k.lower(): v for k, v in resp.getheaders()}
    end = time.monotonic() + deadline_s
    closed = False
    while time.monotonic() < end:
        try:
            if sock.recv(1) == b"":
                closed = True
                break
        except ConnectionResetError:
            closed = True
            break
    return Answer(resp.status, json.loads(body), headers, closed)


def assert_error_json(answer: Answer, status: int, code: str) -> None:
    assert answer.status == status, answer
    assert answer.doc["is_success"] is False and answer.doc["err_code"] == code, answer.doc
    assert answer.doc["err_msg"]


@pytest.fixture
def quick(env_for) -> Iterator[int]:
    """A server with short read timeouts: headers 2 s, body 2 s."""
    with serve_process(env_for(MSGX_HTTP_HEADER_TIMEOUT="2s", MSGX_HTTP_BODY_TIMEOUT="2s")) as (port, _):
        yield port


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)


def test_silent_and_slow_header_clients_are_answered_408_and_disconnected(quick, app):
    """Item 12 (header read timeout): a connection that sends nothing, one that stops half-way
    through its headers, and a keep-alive connection whose second request's headers never finish
    are each answered 408 request_timeout in the error JSON and closed by the server."""
    with connect(quick) as silent:
        assert_error_json(answer := read_answer(silent), 408, "request_timeout")
        assert answer.closed
    with connect(quick) as partial:
        partial.sendall(b"POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\n")
        assert_error_json(answer := read_answer(partial), 408, "request_timeout")
        assert answer.closed
    conn = http.client.HTTPConnection("127.0.0.1", quick, timeout=DEADLINE_S)
    conn.request("GET", "/all/flights")
    first = conn.getresponse()
    assert (first.status, json.loads(first.read())) == (200, [])
    assert conn.sock is not None
    conn.sock.sendall(b"GET /all/flights HTTP/1.1\r\nHo")
    assert_error_json(answer := read_answer(conn.sock), 408, "request_timeout")
    assert answer.closed
    conn.close()
    assert inbox_count(app) == 0


def test_slow_body_is_answered_408_and_disconnected(quick, app):
    """Item 12 (body read timeout): a body trickled a few bytes at a time never completes within
    the body timeout: 408 request_timeout with Connection: close, the server hangs up before the
    client has sent it all, and nothing reaches the mailbox."""
    body = gtdt("77", (1, "C1")).encode()
    head = (f"POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with connect(quick) as sock:
        sock.sendall(head)
        sent = 0
        end = time.monotonic() + DEADLINE_S
        sock.setblocking(False)
        while sent < len(body) - 1 and time.monotonic() < end:    # never the last byte
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    break                          # the server answered: stop sending
            except BlockingIOError:
                pass
            try:
                sock.sendall(body[sent:sent + 4])
            except OSError:
                break
            sent += 4
            time.sleep(0.2)                        # pacing of the slow client, not a wait for the server
        sock.setblocking(True)
        answer = read_answer(sock)
    assert_error_json(answer, 408, "request_timeout")
    assert answer.headers.get("connection") == "close" and answer.closed
    assert sent < len(body) - 1
    assert inbox_count(app) == 0


@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"GET /all/flights HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
    b"POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
    b"POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
], ids=["request-line", "header-syntax", "chunk-framing", "transfer-coding", "two-lengths"])
def test_malformed_framing_gets_the_error_json(quick, app, raw):
    """Item 12 (malformed framing): what h11 refuses is answered 400 malformed_request in the
    error JSON (not uvicorn's plain text) and the connection is closed."""
    with connect(quick) as sock:
        sock.sendall(raw)
        answer = read_answer(sock)
    assert_error_json(answer, 400, "malformed_request")
    assert answer.closed
    assert inbox_count(app) == 0


def test_slash_variant_unknown_path_and_wrong_method_answer_the_error_json(quick, app):
    """Item 12: `/cminmsgs/send/` answers 404 not_found in the error JSON (no bare 307 redirect),
    naming the real endpoint; unknown paths 404 and wrong methods 405 in the same shape; an
    Upgrade header is an ordinary request."""
    msg = gtdt("78", (1, "C2")).encode()
    for method, path, body, status, code in [
            ("POST", "/cminmsgs/send/", msg, 404, "not_found"),
            ("GET", "/all/flights/", None, 404, "not_found"),
            ("GET", "/nowhere", None, 404, "not_found"),
            ("DELETE", "/cminmsgs/send", None, 405, "method_not_allowed")]:
        conn = http.client.HTTPConnection("127.0.0.1", quick, timeout=DEADLINE_S)
        conn.request(method, path, body=body, headers={"Content-Type": "text/xml"})
        resp = conn.getresponse()
        doc = json.loads(resp.read())
        conn.close()
        assert (resp.status, doc["is_success"], doc["err_code"]) == (status, False, code), (path, doc)
        assert resp.getheader("location") is None
    assert "/cminmsgs/send (no trailing slash)" in _error_for(quick, "POST", "/cminmsgs/send/", msg)
    conn = http.client.HTTPConnection("127.0.0.1", quick, timeout=DEADLINE_S)
    conn.request("GET", "/all/flights", headers={"Connection": "Upgrade", "Upgrade": "websocket"})
    resp = conn.getresponse()
    assert (resp.status, json.loads(resp.read())) == (200, [])
    conn.close()
    assert inbox_count(app) == 0


def _error_for(port: int, method: str, path: str, body: bytes | None) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    conn.request(method, path, body=body, headers={"Content-Type": "text/xml"})
    doc = json.loads(conn.getresponse().read())
    conn.close()
    return doc["err_msg"]


def test_connection_cap_refuses_surplus_connections_with_503_json(env_for, app):
    """Item 12 (connection cap): with MSGX_HTTP_MAX_CONNECTIONS=2 and two connections held open, a
    third is answered 503 too_many_connections in the error JSON and closed without reaching the
    app (nothing inserted); once the two are gone, requests are served again."""
    with serve_process(env_for(MSGX_HTTP_MAX_CONNECTIONS="2", MSGX_HTTP_HEADER_TIMEOUT="600s")) as (port, _):
        held = [connect(port), connect(port)]
        try:
            body = gtdt("79", (1, "C3")).encode()
            with connect(port) as third:
                third.sendall(b"POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body) + body)
                answer = read_answer(third)
            assert_error_json(answer, 503, "too_many_connections")
            assert answer.closed
            assert inbox_count(app) == 0
        finally:
            for sock in held:
                sock.close()
        end = time.monotonic() + DEADLINE_S
        while True:   # the server notices the closed connections on its next loop turn
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
            conn.request("GET", "/all/flights")
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status == 200 or time.monotonic() > end:
                break
            time.sleep(0.1)
        assert resp.status == 200
