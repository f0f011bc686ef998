"""The HTTP error contract (US-02 AC3, Q3): one table of codes, one JSON shape, one way to answer.

Every refusal is ``{"is_success": false, "err_code": ..., "err_msg": ...}`` with the status the
table fixes for its code, so callers can branch on ``err_code`` and the docs, the OpenAPI
description and the tests all read the same table instead of repeating it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.responses import JSONResponse


@dataclass(frozen=True)
class ErrorCode:
    status: int
    meaning: str


ERROR_CODES: dict[str, ErrorCode] = {
    "unsupported_media_type": ErrorCode(415, "Content-Type missing or not one the endpoint accepts"),
    "unsupported_charset": ErrorCode(
        415, "charset parameter other than UTF-8, or a UTF-16/UTF-32 byte-order mark"),
    "bad_content_length": ErrorCode(400, "Content-Length header is not a non-negative integer"),
    "body_too_large": ErrorCode(413, "request body exceeds the limit (10 MiB = 10,485,760 bytes for messages)"),
    "incomplete_body": ErrorCode(400, "the client disconnected before sending the whole body"),
    "empty_body": ErrorCode(400, "body is empty or whitespace only (after an optional UTF-8 BOM)"),
    "invalid_utf8": ErrorCode(400, "body is not valid UTF-8"),
    "nul_byte": ErrorCode(400, "body contains a NUL character"),
    "forbidden_xml": ErrorCode(400, "DOCTYPE, ENTITY declaration or XInclude: refused, never resolved"),
    "malformed_xml": ErrorCode(400, "XML is not well-formed (or nests deeper than the limit)"),
    "invalid_json": ErrorCode(400, "body is not a JSON object"),
    "invalid_field": ErrorCode(400, "a field is missing, empty or not in the documented format (a JSON field, or a "
                                    "message's META value or FLID)"),
    "invalid_range": ErrorCode(400, "startDate is later than endDate, the window spans more than one day, or a "
                                    "year lies outside 2000-2099"),
    "malformed_request": ErrorCode(400, "the request is not valid HTTP/1.1 (request line, header syntax, "
                                        "framing or transfer coding); the connection is closed"),
    "request_timeout": ErrorCode(408, "the request line and headers (10 s) or the whole body (30 s) did not arrive "
                                      "in time; the connection is closed"),
    "unauthorized": ErrorCode(401, "MSGX_API_TOKEN is set and the request lacks `Authorization: Bearer <token>` "
                                   "or carries another token (GET /metrics and /openapi.json stay open)"),
    "not_found": ErrorCode(404, "no such endpoint (also a trailing-slash variant such as /cminmsgs/send/)"),
    "unknown_flight": ErrorCode(404, "msgx has written no version of this FLID (never seen, or archived and purged)"),
    "method_not_allowed": ErrorCode(405, "the endpoint does not accept this method"),
    "shadow_mode": ErrorCode(409, "this instance runs in shadow mode (MSGX_MODE=shadow) and never writes the "
                                  "mailbox; nothing was inserted"),
    "writes_stopped": ErrorCode(409, "this installation's writes are stopped for a cut-over (`msgx cutover "
                                     "stop-writes`): it registers and sends no request to the AODB; nothing was "
                                     "registered"),
    "not_implemented": ErrorCode(501, "the endpoint is validated but not yet wired (request tracking)"),
    "too_many_connections": ErrorCode(503, "the server holds its limit of open connections "
                                           "(MSGX_HTTP_MAX_CONNECTIONS); retry later"),
    "mailbox_unavailable": ErrorCode(503, "the mailbox database did not confirm the insert; nothing is promised"),
    "db_unavailable": ErrorCode(503, "the state database could not be read or written; never answered with an "
                                     "empty list, nothing registered"),
    "internal_error": ErrorCode(500, "unexpected server error"),
}


class ApiError(Exception):
    """A refusal with a documented code; the app turns it into the error JSON."""

    def __init__(self, code: str, msg: str, headers: dict[str, str] | None = None) -> None:
        if code not in ERROR_CODES:
            raise KeyError(f"undocumented error code {code!r}")
        super().__init__(f"{code}: {msg}")
        self.code = code
        self.msg = msg
        self.headers = headers

    @property
    def status(self) -> int:
        return ERROR_CODES[self.code].status


def error_response(code: str, msg: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"is_success": False, "err_code": code, "err_msg": msg},
                        status_code=ERROR_CODES[code].status, headers=headers)


def success_response(body: object, status_code: int = 200) -> JSONResponse:
    return JSONResponse({"is_success": True, "body": body}, status_code=status_code)
