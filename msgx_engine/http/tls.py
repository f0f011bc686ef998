"""The HTTP API's certificate and key, read once when ``msgx serve`` starts.

The bearer token must not cross the network in clear text, so ``msgx serve --tls-cert FILE --tls-key
FILE`` serves HTTPS. uvicorn reads the two files itself only once its event loop runs, and an encrypted
key would make OpenSSL ask for a password on a terminal a service does not have. So the pair is loaded
here first, with the same standard-library call, and every problem becomes a ``ConfigError`` (exit 2)
that names the option and the file before any database is touched or a port opened.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from msgx_engine.config import ConfigError


@dataclass(frozen=True)
class ServerTls:
    """A certificate chain and its private key that were read and found to belong together."""

    cert_file: str
    key_file: str


def _read_pem(option: str, path: str, marker: bytes, what: str, example: str) -> None:
    """Refuse a file that cannot be read or holds no PEM block of the expected kind, naming it (OpenSSL's
    own error for either file is the same "PEM lib")."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{option} {path}: the file cannot be read ({reason}); check the path and that the "
                          "account running msgx serve may read it") from None
    if marker not in data:
        raise ConfigError(f"{option} {path}: this file holds no {what} in PEM form (a block starting "
                          f"'{example}')")


def _encrypted_key(key_file: str) -> NoReturn:
    raise ConfigError(f"--tls-key {key_file}: the private key is protected by a password, which msgx serve "
                      "cannot ask for; give it an unencrypted copy readable only by the account running msgx serve")


def load_server_tls(cert_file: str | None, key_file: str | None) -> ServerTls | None:
    """The checked pair, or ``None`` when neither option is given (plain HTTP).

    Refused: one option without the other, a file that cannot be read, a file that is not a PEM
    certificate or key, a password-protected key, and a key that does not match the certificate.
    """
    if not cert_file and not key_file:
        return None
    if not cert_file or not key_file:
        given, missing = ("--tls-cert", "--tls-key") if cert_file else ("--tls-key", "--tls-cert")
        raise ConfigError(f"{given} was given without {missing}: HTTPS needs both the certificate file "
                          "(--tls-cert) and its private key file (--tls-key)")
    _read_pem("--tls-cert", cert_file, b"CERTIFICATE-----", "certificate", "-----BEGIN CERTIFICATE-----")
    _read_pem("--tls-key", key_file, b"PRIVATE KEY-----", "private key", "-----BEGIN PRIVATE KEY-----")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, key_file, password=lambda: _encrypted_key(key_file))
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"--tls-key {key_file} is not the private key of the certificate in --tls-cert "
                              f"{cert_file}; give the key that was used to request that certificate") from None
        raise ConfigError(f"--tls-cert {cert_file} / --tls-key {key_file}: the certificate and key cannot be "
                          f"used ({exc.reason or exc})") from None
    return ServerTls(cert_file=str(Path(cert_file)), key_file=str(Path(key_file)))
