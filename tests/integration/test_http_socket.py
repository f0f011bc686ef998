"""The API over a real socket: `msgx serve` as a subprocess on a free loopback port, driven with
raw HTTP (US-02 AC1-AC3, C-28, US-12 AC1)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterable, Iterator

import pytest

from tests.builders import gtdt
from tests.http_support import MIB, connected, inbox_count, listening_probe, serve_process

LIMIT = 10 * MIB


@pytest.fixture
def server(env_for) -> Iterator[int]:
    with serve_process(env_for()) as (port, _):
        yield port


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        assert resp.getheader("content-type", "").startswith("application/json")
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def raw_exchange(port: int, head: bytes, chunks: Iterable[bytes] = ()) -> tuple[int, dict, int]:
    """Send ``head`` then body frames until the server answers or hangs up; returns (status, json,
    body bytes sent). A reader thread collects the answer while the sender is still sending."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    answer: dict = {}

    def read() -> None:
        try:
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            answer.update(status=resp.status, doc=json.loads(resp.read()))
        except OSError as exc:
            answer["error"] = exc

    reader = threading.Thread(target=read, daemon=True)
    sent = 0
    try:
        sock.sendall(head)
        reader.start()
        for chunk in chunks:
            if answer:
                break
            try:
                sock.sendall(chunk)
            except OSError:
                break
            sent += len(chunk)
        reader.join(timeout=30)
    finally:
        sock.close()
    assert "status" in answer, f"no HTTP answer: {answer.get('error')!r}"
    return answer["status"], answer["doc"], sent


def test_send_then_read_over_a_real_socket(server, app):
    """US-02 AC2/AC3 over the wire: a message gets its committed mailbox id; routing errors and
    reads answer JSON; the description is served."""
    status, doc = request(server, "POST", "/cminmsgs/send", gtdt("88", (1, "C3")).encode(),
                          {"Content-Type": "text/xml; charset=utf-8"})
    assert (status, doc["is_success"]) == (200, True)
    assert app.mailbox.bodies([doc["body"]]) and inbox_count(app) == 1
    assert request(server, "GET", "/all/flights") == (200, [])
    status, spec = request(server, "GET", "/openapi.json")
    assert status == 200 and "/cminmsgs/send" in spec["paths"]
    status, doc = request(server, "POST", "/cminmsgs/send", b"<MSG>", {"Content-Type": "text/xml"})
    assert (status, doc["err_code"]) == (400, "malformed_xml")
    assert inbox_count(app) == 1


def test_declared_oversize_is_answered_without_sending_the_body(server, app):
    """US-02 AC1 (checked before reading it all): only the headers are sent; the 413 arrives although
    the 10 MiB + 1 body never does."""
    head = (f"POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\n"
            f"Content-Length: {LIMIT + 1}\r\n\r\n").encode()
    status, doc, sent = raw_exchange(server, head)
    assert (status, doc["err_code"], sent) == (413, "body_too_large", 0)
    assert inbox_count(app) == 0


def test_chunked_oversize_is_cut_off_while_streaming(server, app):
    """US-02 AC1 (also chunked): a chunked body that would be 80 MiB is refused with 413 long before
    it is all sent (measured: about 15 MiB leave the client: the limit plus socket buffers)."""
    chunk = b" " * 65536
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    head = b"POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nTransfer-Encoding: chunked\r\n\r\n"
    offered = 8 * LIMIT // len(chunk)
    status, doc, sent = raw_exchange(server, head, (frame for _ in range(offered)))
    assert (status, doc["err_code"]) == (413, "body_too_large")
    assert sent < offered * len(frame)
    assert inbox_count(app) == 0


def test_xxe_http_entity_over_the_wire_connects_nowhere(server, app):
    """C-28 over the wire: the served app refuses an http entity and never connects to it."""
    with listening_probe() as (port, srv):
        body = f'<!DOCTYPE MSG [<!ENTITY x SYSTEM "http://127.0.0.1:{port}/">]><MSG>&x;</MSG>'.encode()
        status, doc = request(server, "POST", "/cminmsgs/send", body, {"Content-Type": "application/xml"})
        assert (status, doc["err_code"]) == (400, "forbidden_xml")
        assert not connected(srv)
    assert inbox_count(app) == 0
