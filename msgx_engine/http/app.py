"""The Starlette app: three endpoints, ``/metrics``, the probes and the error contract (US-02, US-08 AC6,
US-12, OPS-2).

The factory takes its collaborators (mailbox, state engine, optional RQFD registrar, optional
metrics renderer, optional API token) instead of building them, so tests hand in real servers,
broken URLs or a fake registrar as they need. Database calls are blocking and run in Starlette's
thread pool; only body streaming is async. The app is wrapped in ``ApiAccess`` (bearer token when
one is configured, one access-log line per request). ``/healthz`` and ``/readyz`` are the probes of
``http/probes.py``: open like ``/metrics``, and answered within seconds whatever the databases do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from msgx_engine.http.access import ApiAccess
from msgx_engine.http.body import read_limited, require_media_type
from msgx_engine.http.errors import ApiError, error_response, success_response
from msgx_engine.http.flights import current_flights_json, flight_history_json
from msgx_engine.http.inbound import validate_message
from msgx_engine.http.openapi import openapi_document
from msgx_engine.http.probes import Readiness, healthz, readiness_check, readyz_endpoint
from msgx_engine.http.schd_sync import SyncRegistrar, parse_window
from msgx_engine.mailbox.adapter import Mailbox, MailboxReadOnly
from msgx_engine.sis.decode import MAX_BODY_BYTES
from msgx_engine.store.cutover_state import RequestsStopped

log = logging.getLogger(__name__)

XML_MEDIA_TYPES = frozenset({"text/xml", "application/xml", "text/plain"})
JSON_MEDIA_TYPES = frozenset({"application/json"})
SYNC_MAX_BYTES = 64 * 1024
METRICS_MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"   # Prometheus text exposition
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}
_PATHS = frozenset({"/cminmsgs/send", "/all/flights", "/schd/sync", "/openapi.json", "/metrics", "/healthz",
                    "/readyz"})


def create_app(*, mailbox: Mailbox, engine: Engine, max_body_bytes: int = MAX_BODY_BYTES,
               schd_sync: SyncRegistrar | None = None, metrics: Callable[[], bytes] | None = None,
               api_token: str | None = None, readiness: Readiness | None = None,
               delivery: tuple[bool, bool] = (True, True)) -> ApiAccess:
    """Build the ASGI app. ``schd_sync`` is the request-tracking extension point (None -> 501);
    ``metrics`` renders ``GET /metrics`` (None -> 404); ``api_token`` guards every other endpoint;
    ``readiness`` answers ``GET /readyz`` (None -> both databases checked through ``engine`` and
    ``mailbox``); ``delivery``: whether Kafka and Redis are configured, as a flight's history
    reports them."""
    readiness = readiness or Readiness(readiness_check(engine, mailbox))

    async def send_message(request: Request) -> Response:
        require_media_type(request, XML_MEDIA_TYPES)
        data = await read_limited(request, max_body_bytes)
        text = validate_message(data, max_bytes=max_body_bytes)
        try:
            # Autocommit insert: when put() returns, the row is committed (US-02 AC2).
            msg_id = await run_in_threadpool(mailbox.put, text)
        except MailboxReadOnly as exc:
            raise ApiError("shadow_mode", str(exc)) from None
        except SQLAlchemyError as exc:
            log.warning("mailbox insert failed: %s", exc.__class__.__name__)
            raise ApiError("mailbox_unavailable",
                           f"mailbox insert not confirmed ({exc.__class__.__name__}); retry later") from None
        return success_response(msg_id)

    def all_flights(request: Request) -> Response:
        try:
            body = current_flights_json(engine)
        except SQLAlchemyError as exc:
            log.warning("flight read failed: %s", exc.__class__.__name__)
            raise ApiError("db_unavailable", f"state database unavailable ({exc.__class__.__name__})") from None
        return Response(body, media_type="application/json")

    def history(request: Request) -> Response:
        flid = request.path_params["flid"]
        try:
            body = flight_history_json(engine, flid, kafka_configured=delivery[0], redis_configured=delivery[1])
        except SQLAlchemyError as exc:
            log.warning("flight history read failed: %s", exc.__class__.__name__)
            raise ApiError("db_unavailable", f"state database unavailable ({exc.__class__.__name__})") from None
        if body is None:
            raise ApiError("unknown_flight", f"msgx has written no version of flight {flid}")
        return Response(body, media_type="application/json")

    async def sync_schedule(request: Request) -> Response:
        require_media_type(request, JSON_MEDIA_TYPES)
        data = await read_limited(request, SYNC_MAX_BYTES)
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            # not UTF-8, not JSON, nested deeper than the parser recurses, or an integer longer
            # than Python converts (ValueError covers UnicodeDecodeError and JSONDecodeError)
            raise ApiError("invalid_json", f"body is not UTF-8 JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
        window = parse_window(doc)
        if schd_sync is None:
            raise ApiError("not_implemented", "the window is valid, but RQFD request tracking is not available "
                                              "yet; nothing was registered or sent")
        try:
            registered = await run_in_threadpool(schd_sync.register, window)
        except RequestsStopped as exc:
            raise ApiError("writes_stopped", str(exc)) from None
        except SQLAlchemyError as exc:
            log.warning("RQFD registration failed: %s", exc.__class__.__name__)
            raise ApiError("db_unavailable", f"state database unavailable ({exc.__class__.__name__}); "
                                             "nothing was registered") from None
        return success_response(registered, status_code=202)

    spec = openapi_document(max_body_bytes)

    def openapi(request: Request) -> Response:
        return JSONResponse(spec)

    def prometheus(request: Request) -> Response:
        if metrics is None:
            raise HTTPException(404, "metrics are not configured on this app")
        return Response(metrics(), media_type=METRICS_MEDIA_TYPE)

    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc.code, exc.msg, exc.headers)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = _HTTP_CODES.get(exc.status_code)
        if code is None:
            return JSONResponse({"is_success": False, "err_code": f"http_{exc.status_code}",
                                 "err_msg": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)
        path = request.url.path
        hint = f"; the endpoint is {path.rstrip('/')} (no trailing slash)" if (
            exc.status_code == 404 and path.endswith("/") and path.rstrip("/") in _PATHS) else ""
        return error_response(code, f"{request.method} {path}: {exc.detail}{hint}", exc.headers)

    async def on_crash(request: Request, exc: Exception) -> Response:
        return error_response("internal_error", exc.__class__.__name__)

    asgi = Starlette(
        routes=[
            Route("/cminmsgs/send", send_message, methods=["POST"]),
            Route("/all/flights", all_flights, methods=["GET"]),
            Route("/flights/{flid}/history", history, methods=["GET"]),
            Route("/schd/sync", sync_schedule, methods=["POST"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz_endpoint(readiness), methods=["GET"]),
        ],
        exception_handlers={ApiError: on_api_error, HTTPException: on_http_error, Exception: on_crash},
    )
    # A trailing-slash variant (/cminmsgs/send/) gets the 404 error JSON, not a bare 307.
    asgi.router.redirect_slashes = False
    return ApiAccess(asgi, api_token)
