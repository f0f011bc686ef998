"""Request bodies: media-type checks and a bounded, streaming read (US-02 AC1, C-28).

The size limit is enforced twice: a declared Content-Length over the limit is refused before a
single body byte is read, and a chunked (or lying) body is counted while it streams and refused
the moment it passes the limit, so an oversize request never sits in memory whole.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.requests import ClientDisconnect, Request

from msgx_engine.http.errors import ApiError

UTF8_CHARSETS = frozenset({"utf-8", "utf8"})


def parse_content_type(header: str | None) -> tuple[str, dict[str, str]]:
    """``text/xml; charset="UTF-8"`` -> ("text/xml", {"charset": "utf-8"}); names lower-cased."""
    if not header:
        return "", {}
    media, *raw_params = header.split(";")
    params: dict[str, str] = {}
    for raw in raw_params:
        name, sep, value = raw.partition("=")
        if sep:
            params[name.strip().lower()] = value.strip().strip('"').strip().lower()
    return media.strip().lower(), params


def require_media_type(request: Request, accepted: Collection[str]) -> dict[str, str]:
    """Refuse (415) anything but the accepted media types and a UTF-8 (or absent) charset."""
    media, params = parse_content_type(request.headers.get("content-type"))
    if media not in accepted:
        shown = media or "none"
        raise ApiError("unsupported_media_type",
                       f"Content-Type {shown!r} is not accepted; use one of {', '.join(sorted(accepted))}")
    charset = params.get("charset")
    if charset is not None and charset not in UTF8_CHARSETS:
        raise ApiError("unsupported_charset", f"charset {charset!r} is not accepted; bodies are UTF-8")
    return params


def declared_length(request: Request, limit: int) -> int | None:
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    raw = raw.strip()
    if not raw.isdigit():
        raise ApiError("bad_content_length", f"Content-Length {raw!r} is not a non-negative integer")
    length = int(raw)
    if length > limit:
        raise ApiError("body_too_large", f"Content-Length {length} exceeds the limit of {limit} bytes",
                       headers={"Connection": "close"})
    return length


async def read_limited(request: Request, limit: int) -> bytes:
    """The whole body, or ApiError(body_too_large) as soon as more than ``limit`` bytes arrive."""
    declared_length(request, limit)
    buf = bytearray()
    try:
        async for chunk in request.stream():
            if len(buf) + len(chunk) > limit:
                raise ApiError("body_too_large", f"body exceeds the limit of {limit} bytes",
                               headers={"Connection": "close"})
            buf += chunk
    except ClientDisconnect:
        raise ApiError("incomplete_body", "client disconnected before the body was complete") from None
    return bytes(buf)
