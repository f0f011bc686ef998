"""OPS-2: logs never contain passwords from URLs or whole message bodies (first
200 characters at most). The helpers of ``msgx_engine.redact`` and the filter ``msgx`` installs."""

from __future__ import annotations

import logging

import pytest

from msgx_engine.cli import main as cli
from msgx_engine.redact import BODY_LIMIT, RedactingFilter, clip, redact_urls, safe_text, url_for_log


@pytest.mark.parametrize(("text", "expected"), [
    ("postgresql+psycopg://msgx:s3cret@db:5432/msgx", "postgresql+psycopg://msgx:***@db:5432/msgx"),
    ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("mysql+pymysql://root:p@ss:w0rd@10.0.0.5:3306/aodb", "mysql+pymysql://root:***@10.0.0.5:3306/aodb"),
    ("could not reach postgresql://a:b@h1/x nor redis://:c@h2", "could not reach postgresql://a:***@h1/x nor "
                                                                 "redis://:***@h2"),
    # nothing to hide: no password, a port that is not a password, a query with an '@'
    ("mysql+pymysql://root@127.0.0.1:3306/aodb", "mysql+pymysql://root@127.0.0.1:3306/aodb"),
    ("http://127.0.0.1:8080/x?mail=a@b", "http://127.0.0.1:8080/x?mail=a@b"),
])
def test_url_passwords_are_masked(text, expected):
    """A URL's password never reaches a log line; user and host stay readable."""
    assert redact_urls(text) == expected


def test_bodies_are_clipped_to_200_characters():
    """A 10 kB body keeps its first 200 characters and says how much
    was left out; short texts are unchanged."""
    body = "<MSG>" + "X" * 10_000 + "</MSG>"
    out = clip(body)
    assert out.startswith(body[:BODY_LIMIT]) and "X" * (BODY_LIMIT + 1) not in out
    assert f"{len(body) - BODY_LIMIT} more characters" in out
    assert clip("short") == "short"
    assert safe_text(ValueError("postgresql://u:pw@h/x " + "y" * 500)).count("y") == BODY_LIMIT - len(
        "postgresql://u:***@h/x ")


def test_webhook_urls_are_logged_without_their_path():
    """A Slack webhook's path is its secret: only scheme, host and port are logged."""
    assert url_for_log("https://hooks.slack.com/services/T000/B000/XXXX") == "https://hooks.slack.com/…"
    assert url_for_log("http://127.0.0.1:9999/hook?token=abc") == "http://127.0.0.1:9999/…"


def test_filter_rewrites_messages_arguments_and_tracebacks():
    """The filter ``msgx`` installs on its log handlers: %-arguments, long lines and exception text are
    cleaned before any handler writes them."""
    f = RedactingFilter()
    record = logging.LogRecord("msgx.test", logging.ERROR, __file__, 1, "cannot reach %s: %s",
                               ("postgresql://u:topsecret@h/db", "B" * 5000), None)
    assert f.filter(record)
    line = record.getMessage()
    assert "topsecret" not in line and "postgresql://u:***@h/db" in line and len(line) < 1000
    try:
        raise ConnectionError("redis://:hunter2@cache:6379 refused")
    except ConnectionError:
        import sys

        record = logging.LogRecord("msgx.test", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    f.filter(record)
    formatted = logging.Formatter().format(record)
    assert "hunter2" not in formatted and "redis://:***@cache:6379" in formatted


def test_msgx_installs_the_filter_on_its_handlers():
    """``msgx``'s logging set-up puts the filter on every root handler, once."""
    root = logging.getLogger()
    handler = logging.StreamHandler()
    root.addHandler(handler)
    try:
        cli.install_redaction()
        cli.install_redaction()
        assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
    finally:
        root.removeHandler(handler)
