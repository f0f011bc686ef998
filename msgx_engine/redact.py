"""What may reach a log line: no password from a URL, no whole message body (OPS-2).

Server URLs carry credentials (``postgresql://user:secret@host/db``) and turn up in exception text
(a driver that names what it could not reach); message bodies are up to 10 MiB of airport data and
turn up in decode errors and SQL error parameters. Both are cut here, at the bottom of the
package, so every layer can use the same two rules:

- ``redact_urls``: the password of every ``scheme://user:password@`` in a text becomes ``***``;
- ``clip``: at most ``BODY_LIMIT`` (200) characters, with a note of how much was left out.

``RedactingFilter`` applies both to every record a handler emits (installed by ``msgx``'s logging
set-up), so a call site that forgets is still covered; call sites that build a detail string
(stored and logged) use ``safe_text`` directly.
"""

from __future__ import annotations

import logging
import re

BODY_LIMIT = 200

# scheme://user:password@  (the user part may be empty; the password runs to the last '@' before
# the host, so a password containing '@' or ':' is still covered)
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s/:@]*:)(?P<pw>[^\s/]*)@(?=[^\s@]*(?:[/\s]|$))")


def redact_urls(text: str) -> str:
    """Replace the password of every URL in ``text`` with ``***`` (the user and host stay: they
    tell an operator which server was meant)."""
    return _USERINFO.sub(lambda m: f"{m.group('head')}***@", text)


def clip(text: str, limit: int = BODY_LIMIT) -> str:
    """At most ``limit`` characters of ``text``, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters not shown)"


def safe_text(text: object, limit: int = BODY_LIMIT) -> str:
    """``str(text)`` without URL passwords, clipped: for exception details that go to a log."""
    return clip(redact_urls(str(text)), limit)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one log line: its class and the first line of its text (a driver's error
    says there what happened, "... (timed out)"), URL passwords masked, at most ``limit`` characters."""
    text = str(exc).strip().splitlines()
    return redact_urls(f"{exc.__class__.__name__}: {text[0] if text else ''}".rstrip(": "))[:limit]


def url_for_log(url: str) -> str:
    """A URL reduced to scheme, host and port: for URLs whose path or query is itself the secret
    (a Slack webhook's path is its token)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable URL>"
    return f"{parts.scheme}://{host}{port}/…"


class RedactingFilter(logging.Filter):
    """Rewrites each record's message: URL passwords out, and at most ``limit`` characters.

    The limit for a whole log line is larger than ``BODY_LIMIT`` (a line may carry a clipped body
    plus its context); it still keeps a 10 MiB body out of the log if a call site passed one in.
    """

    def __init__(self, limit: int = 4 * BODY_LIMIT) -> None:
        super().__init__()
        self.limit = limit

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True       # a broken format string: let logging report it as usual
        cleaned = clip(redact_urls(message), self.limit)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            # the traceback is formatted here once (the handler's formatter reuses exc_text) so
            # that an exception naming a URL loses its password too
            record.exc_text = redact_urls(logging.Formatter().formatException(record.exc_info))
        return True
