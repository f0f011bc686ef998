"""HTTPS over a real socket: ``msgx serve --tls-cert FILE --tls-key FILE`` as a process against the
test's PostgreSQL and MariaDB, with a CA and server certificate made by ``openssl`` for this test
(OPS-2: access control, the bearer token never in clear text; US-02 AC4: the trust boundary).

The refusals (one option alone, an unreadable file, a key of another certificate, --allow-public
without encryption) exit with status 2 before the port opens."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys

import pytest

from tests.builders import gtdt
from tests.http_support import inbox_count, serve_process
from tests.private_servers import free_port
from tests.tls_support import TestPki, make_pki

TOKEN = "tok-7d41e0-not-a-real-secret"


@pytest.fixture
def pki(tmp_path) -> TestPki:
    return make_pki(tmp_path)


def tls_args(pki: TestPki) -> tuple[str, ...]:
    return "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)


def https(port: int, context: ssl.SSLContext, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None, host: str = "127.0.0.1") -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection(host, port, timeout=30, context=context)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def refused(env: dict[str, str], *args: str) -> str:
    """Run ``msgx serve`` expecting a refusal: exit 2, nothing listening; returns its stderr."""
    port = free_port()
    done = subprocess.run([sys.executable, "-m", "msgx_engine.cli", "serve", "--port", str(port), *args],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("msgx: configuration refused: "), done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


def test_https_serves_the_api_with_the_token_enforced(env_for, app, pki):
    """OPS-2: with --tls-cert/--tls-key the API answers HTTPS to a client that trusts the CA and checks
    the host name; the token is still required (401 without it, nothing written); /metrics, /healthz
    and /readyz answer without it; a message sent over HTTPS reaches the mailbox."""
    ca = pki.client_context()
    with serve_process(env_for(MSGX_API_TOKEN=TOKEN), *tls_args(pki)) as (port, proc):
        message = gtdt("TLS42", (1, "C3")).encode()
        xml = {"Content-Type": "text/xml"}
        status, body = https(port, ca, "POST", "/cminmsgs/send", message, xml)
        assert status == 401 and json.loads(body)["err_code"] == "unauthorized"
        assert inbox_count(app) == 0
        status, body = https(port, ca, "POST", "/cminmsgs/send", message, {**xml, "Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and json.loads(body)["is_success"] is True and inbox_count(app) == 1
        assert https(port, ca, "GET", "/all/flights", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
        assert https(port, ca, "GET", "/all/flights", host="localhost")[0] == 401
        status, body = https(port, ca, "GET", "/metrics")
        assert status == 200 and b"msgx_database_up 1" in body
        assert https(port, ca, "GET", "/healthz")[0] == 200
        assert https(port, ca, "GET", "/readyz")[0] == 200
    assert f"listening on https://127.0.0.1:{port}" in proc.stderr_text
    assert TOKEN not in proc.stderr_text


def test_plain_http_and_untrusted_clients_get_nothing(env_for, pki):
    """OPS-2: plain HTTP to the TLS port gets no HTTP answer (so a token sent that way is never
    accepted), and a client that does not trust the test CA refuses the server's certificate."""
    with serve_process(env_for(MSGX_API_TOKEN=TOKEN), *tls_args(pki)) as (port, _):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            with pytest.raises((http.client.HTTPException, ConnectionError)):
                conn.request("GET", "/all/flights", headers={"Authorization": f"Bearer {TOKEN}"})
                conn.getresponse()
        finally:
            conn.close()
        with pytest.raises(ssl.SSLCertVerificationError):
            https(port, ssl.create_default_context(), "GET", "/healthz")
        assert https(port, pki.client_context(), "GET", "/healthz")[0] == 200    # the server is still up


def test_allow_public_with_token_and_tls_starts(env_for, pki):
    """OPS-2, US-02 AC4: --allow-public with a token and TLS is accepted (here on loopback) and the
    token is enforced over HTTPS."""
    ca = pki.client_context()
    with serve_process(env_for(MSGX_API_TOKEN=TOKEN), "--allow-public", *tls_args(pki)) as (port, _):
        assert https(port, ca, "GET", "/all/flights")[0] == 401
        assert https(port, ca, "GET", "/all/flights", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_refusals_exit_2_before_listening(env_for, pki, tmp_path):
    """OPS-2: each bad TLS setting is refused at start with exit status 2 and a message naming the
    options and file: one option alone, a missing file, a key of another certificate, and
    --allow-public with a token but no TLS and no --behind-tls-proxy."""
    env = env_for(MSGX_API_TOKEN=TOKEN)
    text = refused(env, "--tls-cert", str(pki.server_cert))
    assert "--tls-cert was given without --tls-key" in text
    text = refused(env, "--tls-key", str(pki.server_key))
    assert "--tls-key was given without --tls-cert" in text
    missing = tmp_path / "gone.crt"
    text = refused(env, "--tls-cert", str(missing), "--tls-key", str(pki.server_key))
    assert f"--tls-cert {missing}: the file cannot be read" in text
    text = refused(env, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.other_key))
    assert f"--tls-key {pki.other_key} is not the private key of the certificate" in text
    text = refused(env, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.encrypted_key))
    assert "protected by a password" in text
    text = refused(env, "--host", "0.0.0.0", "--allow-public")
    assert all(name in text for name in ("--allow-public", "--tls-cert", "--tls-key", "--behind-tls-proxy"))
    assert "MSGX_API_TOKEN" not in text
