"""Certificates made for one test with the ``openssl`` command: a private CA, a server certificate it
signed for 127.0.0.1 and localhost, and the broken variants ``msgx serve`` must refuse (a key of
another certificate, a password-protected key)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
SERVER_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


@dataclass(frozen=True)
class TestPki:
    __test__ = False    # a data holder, not a test class

    ca_cert: Path
    server_cert: Path
    server_key: Path
    other_key: Path         # a valid key that belongs to no certificate here
    encrypted_key: Path     # the server key, protected by a password

    def client_context(self) -> ssl.SSLContext:
        """A client that trusts only the test CA and checks the host name, as a caller would."""
        return ssl.create_default_context(cafile=str(self.ca_cert))


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def make_pki(directory: Path) -> TestPki:
    """Write a CA, a server certificate and key signed by it, and the broken variants into ``directory``."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = directory
    _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=msgx test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    _openssl("req", *EC, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "server.ext").write_text(SERVER_EXTENSIONS)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=d)
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "other.key", cwd=d)
    _openssl("pkey", "-in", "server.key", "-aes256", "-passout", "pass:not-a-real-secret", "-out", "encrypted.key",
             cwd=d)
    for key in ("ca.key", "server.key", "other.key", "encrypted.key"):
        (d / key).chmod(0o600)
    return TestPki(ca_cert=d / "ca.crt", server_cert=d / "server.crt", server_key=d / "server.key",
                   other_key=d / "other.key", encrypted_key=d / "encrypted.key")
