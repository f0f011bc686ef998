"""``msgx serve``: the HTTP API under uvicorn, loopback unless explicitly made public.

US-02 AC4 keeps the API inside the internal network behind a gateway; OPS-2 asks for access control
on its sensitive operations. So ``MSGX_API_TOKEN`` (when set) guards every endpoint but ``/metrics``,
``/openapi.json`` and the probes ``/healthz`` and ``/readyz`` (``http/access.py``); a bind address
that is not loopback is refused unless the operator says ``--allow-public``, and ``--allow-public``
is refused without a token and without TLS: either ``--tls-cert``/``--tls-key`` (HTTPS served here,
``http/tls.py``) or ``--behind-tls-proxy``, the operator's statement that a proxy in front terminates
TLS, since a bearer token sent in clear text can be read off the network. The certificate and key,
then the servers, are checked before the port opens (OPS-1 startup refusal).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys

from msgx_engine.app import App
from msgx_engine.config import ConfigError, Settings
from msgx_engine.http.schd_sync import SyncWindow
from msgx_engine.http.tls import load_server_tls
from msgx_engine.monitor.metrics import metrics_renderer
from msgx_engine.requests.tracker import RequestTracker

LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str) -> bool:
    """True when every address ``host`` can mean is a loopback address (no DNS for literals)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    addrs = {str(info[4][0]) for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def check_bind(host: str, allow_public: bool, token: str | None = None, *, tls: bool = False,
               behind_tls_proxy: bool = False) -> None:
    """Refuse a listener reachable from the network unless it is meant to be, guarded by a token, and
    encrypted here or by a proxy in front; every missing piece is named in one message."""
    if allow_public:
        missing = []
        if not token:
            missing.append("a bearer token: set MSGX_API_TOKEN (callers send `Authorization: Bearer <token>`)")
        if not tls and not behind_tls_proxy:
            missing.append("encryption, so the token never crosses the network in clear text: pass --tls-cert FILE "
                           "--tls-key FILE to serve HTTPS, or --behind-tls-proxy when a proxy in front of msgx "
                           "serve terminates TLS and reaches it over a trusted link")
        if missing:
            raise ConfigError("--allow-public needs " + "; and ".join(missing) + ". A public listener without "
                              "them would let anyone on the network insert messages and request flight plans")
    elif not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r}: the HTTP API belongs on the internal network behind a gateway; "
            "bind 127.0.0.1, or pass --allow-public (with MSGX_API_TOKEN, and --tls-cert/--tls-key or "
            "--behind-tls-proxy) once a gateway restricts and audits the callers")


class RqfdSyncRegistrar:
    """The ``SyncRegistrar`` behind ``POST /schd/sync`` (US-08 AC6, C-33, Q17): registers one RQFD
    for the validated window (the window start's date is the requested day).

    It only registers: the request tracking job (or ``msgx request track``) writes it to COUTMSGS.
    So the answer says REGISTERED with the request id and operating day, and nothing about the
    plan being updated: the promise ends at the mailbox even once sent (C-24), and the plan changes
    only when the AODB's SCHD RESP arrives and is applied (US-06).
    """

    def __init__(self, tracker: RequestTracker) -> None:
        self.tracker = tracker

    def register(self, window: SyncWindow) -> object:
        doc = self.tracker.register_rqfd(window.start, window.end).as_json()
        doc["note"] = ("registered: the request is written to the AODB mailbox by request tracking; "
                       "the flight plan is not updated until the AODB answers")
        return doc


def sync_registrar(app: App) -> RqfdSyncRegistrar:
    """POST /schd/sync registers an RQFD through request tracking (US-08 AC6); the tracking job
    or ``msgx request track`` sends it."""
    return RqfdSyncRegistrar(RequestTracker(app.engine, app.mailbox, app.clock))


def serve(host: str, port: int, allow_public: bool, tls_cert: str | None = None, tls_key: str | None = None,
          behind_tls_proxy: bool = False) -> int:
    """Run the API until interrupted. Returns the process exit code."""
    import uvicorn

    from msgx_engine.http.app import create_app
    from msgx_engine.http.connection import BodyTimeout, guarded_protocol

    tls = load_server_tls(tls_cert, tls_key)
    settings = Settings.from_env()
    check_bind(host, allow_public, settings.api_token, tls=tls is not None, behind_tls_proxy=behind_tls_proxy)
    app = App.from_settings(settings)
    app.check_ready()
    metrics = metrics_renderer(app.engine, app.mode, app.mailbox, kafka_configured=bool(settings.kafka_bootstrap))
    asgi = create_app(mailbox=app.mailbox, engine=app.engine, max_body_bytes=app.settings.max_body_bytes,
                      schd_sync=sync_registrar(app), metrics=metrics, api_token=settings.api_token,
                      delivery=(bool(settings.kafka_bootstrap), bool(settings.redis_url)))
    logging.getLogger("msgx.http.access").setLevel(logging.INFO)   # the access log shows by default
    scheme = "https" if tls else "http"
    print(f"msgx serve: listening on {scheme}://{host}:{port} (OpenAPI at /openapi.json)", file=sys.stderr,
          flush=True)
    try:
        # h11 with msgx's header timeout, connection cap and error JSON (http/connection.py); no
        # WebSocket upgrade, so an Upgrade header is an ordinary request answered by the routes.
        uvicorn.run(BodyTimeout(asgi, settings.http_body_timeout_s), host=host, port=port, log_level="warning",
                    server_header=False, proxy_headers=False, timeout_keep_alive=5, ws="none",
                    http=guarded_protocol(settings.http_header_timeout_s, settings.http_max_connections),
                    ssl_certfile=tls.cert_file if tls else None, ssl_keyfile=tls.key_file if tls else None)
    finally:
        app.dispose()
    return 0
