"""The HTTP API's TLS pair is checked when ``msgx serve`` starts, and ``--allow-public`` needs both a
token and encryption (OPS-2: access control on sensitive operations; US-02 AC4: the trust boundary).
Certificates are made by ``openssl`` in the test's directory; nothing here opens a socket."""

from __future__ import annotations

import pytest

from msgx_engine.config import ConfigError
from msgx_engine.http.server import check_bind
from msgx_engine.http.tls import load_server_tls
from tests.tls_support import TestPki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> TestPki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_a_matching_pair_loads_and_no_options_mean_plain_http(pki):
    """OPS-2: the CA-signed server certificate and its key are accepted; neither option is plain HTTP."""
    tls = load_server_tls(str(pki.server_cert), str(pki.server_key))
    assert tls is not None and (tls.cert_file, tls.key_file) == (str(pki.server_cert), str(pki.server_key))
    assert load_server_tls(None, None) is None


def test_one_option_without_the_other_is_refused(pki):
    """OPS-2: a certificate without its key (or the reverse) is refused, naming both options."""
    for cert, key, given in ((str(pki.server_cert), None, "--tls-cert"), (None, str(pki.server_key), "--tls-key")):
        with pytest.raises(ConfigError, match=f"^{given} was given without") as refused:
            load_server_tls(cert, key)
        assert "--tls-cert" in str(refused.value) and "--tls-key" in str(refused.value)


def test_unreadable_or_wrong_files_are_refused_naming_the_file(pki, tmp_path):
    """OPS-2: a missing file, a directory, a key given as certificate or a certificate given as key
    is refused with the option and the path, before OpenSSL's own terse error could show."""
    missing = tmp_path / "no-such.key"
    cases = [
        (str(pki.server_cert), str(missing), f"--tls-key {missing}: the file cannot be read"),
        (str(tmp_path), str(pki.server_key), f"--tls-cert {tmp_path}: the file cannot be read"),
        (str(pki.server_key), str(pki.server_key), "--tls-cert .*holds no certificate"),
        (str(pki.server_cert), str(pki.server_cert), "--tls-key .*holds no private key"),
    ]
    for cert, key, message in cases:
        with pytest.raises(ConfigError, match=message):
            load_server_tls(cert, key)


def test_a_key_of_another_certificate_is_refused(pki):
    """OPS-2: a valid key that does not belong to the certificate is refused at start, not at the
    first handshake."""
    with pytest.raises(ConfigError, match="is not the private key of the certificate"):
        load_server_tls(str(pki.server_cert), str(pki.other_key))


def test_a_password_protected_key_is_refused_without_prompting(pki):
    """OPS-2: an encrypted key is refused with a message; OpenSSL never waits for a password on a
    terminal (stdin is not read: the test would hang if it were)."""
    with pytest.raises(ConfigError, match="protected by a password"):
        load_server_tls(str(pki.server_cert), str(pki.encrypted_key))


def test_allow_public_needs_a_token_and_encryption():
    """OPS-2, US-02 AC4: --allow-public is refused without a token, without TLS (here or at a proxy
    in front), and names every missing piece; with both it is accepted."""
    with pytest.raises(ConfigError) as refused:
        check_bind("0.0.0.0", allow_public=True)
    text = str(refused.value)
    assert all(name in text for name in ("--allow-public", "MSGX_API_TOKEN", "--tls-cert", "--behind-tls-proxy"))
    with pytest.raises(ConfigError, match="--tls-cert FILE --tls-key FILE") as refused:
        check_bind("0.0.0.0", allow_public=True, token="t")
    assert "MSGX_API_TOKEN" not in str(refused.value)
    with pytest.raises(ConfigError, match="MSGX_API_TOKEN") as refused:
        check_bind("0.0.0.0", allow_public=True, tls=True)
    assert "--tls-cert" not in str(refused.value)
    check_bind("0.0.0.0", allow_public=True, token="t", tls=True)
    check_bind("0.0.0.0", allow_public=True, token="t", behind_tls_proxy=True)
    with pytest.raises(ConfigError, match="refusing to listen on '0.0.0.0'"):
        check_bind("0.0.0.0", allow_public=False, token="t", tls=True)
    check_bind("127.0.0.1", allow_public=False)
