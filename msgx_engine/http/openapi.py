"""The OpenAPI 3.1 description served at ``/openapi.json``.

Written out rather than generated: a handful of endpoints do not need a framework, and the error codes
come from ``errors.ERROR_CODES`` so the description cannot drift from what the app answers. The
three API endpoints declare the bearer token (``MSGX_API_TOKEN``, enforced only when it is set);
``/metrics``, the probes ``/healthz`` and ``/readyz`` and this description are open.
"""

from __future__ import annotations

from msgx_engine.http.errors import ERROR_CODES
from msgx_engine.http.schd_sync import TIME_FORMAT_DOC

SEND_CODES = ("unsupported_media_type", "unsupported_charset", "bad_content_length", "body_too_large",
              "incomplete_body", "empty_body", "invalid_utf8", "nul_byte", "forbidden_xml", "malformed_xml",
              "invalid_field", "mailbox_unavailable", "unauthorized")
FLIGHTS_CODES = ("unauthorized", "db_unavailable")
HISTORY_CODES = ("unauthorized", "unknown_flight", "db_unavailable")
SYNC_CODES = ("unsupported_media_type", "unsupported_charset", "bad_content_length", "body_too_large",
              "invalid_json", "invalid_field", "invalid_range", "writes_stopped", "not_implemented", "db_unavailable",
              "unauthorized")


BEARER: list[dict[str, list[str]]] = [{"bearer": []}]


def _errors(codes: tuple[str, ...]) -> dict:
    by_status: dict[int, list[str]] = {}
    for code in codes:
        by_status.setdefault(ERROR_CODES[code].status, []).append(code)
    return {
        str(status): {
            "description": "; ".join(f"{c}: {ERROR_CODES[c].meaning}" for c in names),
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
        for status, names in sorted(by_status.items())
    }


def _success(body_schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": {
        "type": "object", "required": ["is_success", "body"],
        "properties": {"is_success": {"const": True}, "body": body_schema}}}}}


def openapi_document(max_body_bytes: int) -> dict:
    xml_body = {"schema": {"type": "string", "maxLength": max_body_bytes}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "msgx HTTP API", "version": "1",
                 "description": "Internal network only (US-02 AC4). Errors: "
                                '{"is_success": false, "err_code": ..., "err_msg": ...}.'},
        "paths": {
            "/cminmsgs/send": {"post": {
                "security": BEARER,
                "summary": "Insert one SIS XML message into CMINMSGS (US-02, C-28)",
                "description": f"UTF-8 XML, at most {max_body_bytes} bytes. Success means the mailbox row is "
                               "committed; processing happens later through intake like any other row.",
                "requestBody": {"required": True, "content": {
                    "text/xml": xml_body, "application/xml": xml_body, "text/plain": xml_body}},
                "responses": {"200": _success({"type": "integer", "description": "CMINMSGS_ID"},
                                              "inserted and committed"), **_errors(SEND_CODES)},
            }},
            "/all/flights": {"get": {
                "security": BEARER,
                "summary": "Every current flight: not deleted, no MAID (US-12, D11)",
                "description": "One REPEATABLE READ, read-only transaction on PostgreSQL; a JSON array of "
                               "whole-state documents ordered by FLID (code-point order of the string).",
                "responses": {"200": {"description": "whole-state documents", "content": {"application/json": {
                    "schema": {"type": "array", "items": {"$ref": "#/components/schemas/FlightState"}}}}},
                              **_errors(FLIGHTS_CODES)},
            }},
            "/flights/{flid}/history": {"get": {
                "security": BEARER,
                "summary": "One flight's versions, oldest first: the message behind each and how far its events got",
                "description": "From the outbox (archived events included): per state_version the mailbox message "
                               "that caused it (msg_id, type, styp, received_at: when msgx registered it), what it "
                               "did (created, changed, deleted), the fields it changed, and whether its events "
                               "reached Kafka (delivered, waiting, dead, unreleased, not configured) and Redis "
                               "(written, unreleased, not configured). The same as `msgx history FLID --json`.",
                "parameters": [{"name": "flid", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "the flight's history", "content": {"application/json": {
                    "schema": {"type": "object", "required": ["flid", "changes"], "properties": {
                        "flid": {"type": "string"},
                        "changes": {"type": "array", "items": {"type": "object", "required": [
                            "state_version", "msg_id", "type", "styp", "received_at", "what", "fields", "events",
                            "kafka_sent", "kafka_dead", "kafka", "redis"]}}}}}}},
                              **_errors(HISTORY_CODES)},
            }},
            "/schd/sync": {"post": {
                "security": BEARER,
                "summary": "Request the daily flight plan (RQFD) for a window (US-08 AC6, C-33)",
                "description": "Registers one RQFD for the window (request tracking sends it to the AODB "
                               "mailbox); the answer says REGISTERED, never that the plan is updated. "
                               "501 only when the app was built without a registrar.",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["startDate", "endDate"],
                    "properties": {"startDate": {"type": "string", "description": TIME_FORMAT_DOC},
                                   "endDate": {"type": "string", "description": TIME_FORMAT_DOC}}}}}},
                "responses": {"202": _success({"type": "object"},
                                              "RQFD registered: request_id, state REGISTERED, fday"),
                              **_errors(SYNC_CODES)},
            }},
            "/healthz": {"get": {
                "summary": "Liveness probe: the process is up and serving; asks no database, never needs the token",
                "responses": {"200": {"description": "always, while the process serves", "content": {
                    "application/json": {"schema": {"type": "object", "required": ["status"],
                                                    "properties": {"status": {"const": "ok"}}}}}}},
            }},
            "/readyz": {"get": {
                "summary": "Readiness probe: both databases answer and the state schema is current; never needs "
                           "the token",
                "description": "Answers within a few seconds even when a database hangs (503 with the reason "
                               "then).",
                "responses": {
                    "200": {"description": "ready", "content": {"application/json": {"schema": {
                        "type": "object", "required": ["status"], "properties": {"status": {"const": "ready"}}}}}},
                    "503": {"description": "not ready: a database unreachable or too slow, the state schema "
                                           "behind, or the mailbox tables missing", "content": {"application/json": {
                        "schema": {"type": "object", "required": ["status", "reason"],
                                   "properties": {"status": {"const": "not ready"},
                                                  "reason": {"type": "string"}}}}}}},
            }},
            "/metrics": {"get": {
                "summary": "Prometheus metrics computed from PostgreSQL at scrape time (OPS-2); never needs "
                           "the token",
                "responses": {"200": {"description": "Prometheus text exposition format 0.0.4, series msgx_*",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}}},
            }},
        },
        "components": {"securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "Required only when the server has MSGX_API_TOKEN set: `Authorization: Bearer <token>`"}},
                       "schemas": {
            "Error": {"type": "object", "required": ["is_success", "err_code", "err_msg"], "properties": {
                "is_success": {"const": False},
                "err_code": {"type": "string", "enum": sorted(ERROR_CODES)},
                "err_msg": {"type": "string"}}},
            "FlightState": {"type": "object", "required": ["FLID", "STATE_VERSION"],
                            "additionalProperties": True,
                            "properties": {"FLID": {"type": "string"}, "STATE_VERSION": {"type": "integer"},
                                           "FDAY": {"type": "string", "format": "date"}}},
        }},
    }
