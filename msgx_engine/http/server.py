"""``msgx serve``: the HTTP API under uvicorn, loopback unless explicitly made public.

The API has no authentication: US-02 AC4 keeps it inside the internal network behind a gateway.
So a bind address that is not loopback is refused unless the operator says ``--allow-public``,
and the servers are checked before the port opens (OPS-1 startup refusal).
"""

from __future__ import annotations

import ipaddress
import socket
import sys

from msgx_engine.config import ConfigError

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
    addrs = {info[4][0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def check_bind(host: str, allow_public: bool) -> None:
    if not allow_public and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r}: the HTTP API has no authentication and belongs on the "
            "internal network behind a gateway (US-02 AC4); bind 127.0.0.1, or pass --allow-public "
            "once a gateway restricts and audits the callers")


def sync_registrar(app) -> object:
    """POST /schd/sync registers an RQFD through request tracking (US-08 AC6); the tracking job
    or ``msgx request track`` sends it."""
    from msgx_engine.requests.registrar import RqfdSyncRegistrar
    from msgx_engine.requests.tracker import RequestTracker

    return RqfdSyncRegistrar(RequestTracker(app.engine, app.mailbox, app.clock))


def serve(host: str, port: int, allow_public: bool) -> int:
    """Run the API until interrupted. Returns the process exit code."""
    import uvicorn

    from msgx_engine.app import App
    from msgx_engine.http.app import create_app

    check_bind(host, allow_public)
    app = App.from_settings()
    app.check_ready()
    asgi = create_app(mailbox=app.mailbox, engine=app.engine, max_body_bytes=app.settings.max_body_bytes,
                      schd_sync=sync_registrar(app))
    print(f"msgx serve: listening on http://{host}:{port} (OpenAPI at /openapi.json)", file=sys.stderr,
          flush=True)
    try:
        uvicorn.run(asgi, host=host, port=port, log_level="warning", server_header=False,
                    proxy_headers=False, timeout_keep_alive=5)
    finally:
        app.dispose()
    return 0
