"""OPS-2: no whole message body in logs. Database errors are a path for bodies to
reach a log line: SQLAlchemy puts a failing statement's parameters into the error text (every engine
msgx builds hides them), and the server may quote the offending value in its own message (the
log call sites pass such texts through ``safe_text``: 200 characters at most)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from msgx_engine.db import make_engine
from msgx_engine.redact import BODY_LIMIT, safe_text


def test_database_errors_never_carry_statement_parameters(pg_url, mailbox_url):
    """A failing statement whose parameter is a 5,000-character body: the error text does not contain it,
    on PostgreSQL and on the MariaDB mailbox engine alike."""
    body = "<MSG>" + "B" * 5000 + "</MSG>"
    cases = ((pg_url, "SELECT CAST(:body AS integer)"), (mailbox_url, "SELECT * FROM no_such_table WHERE x = :body"))
    for url, sql in cases:
        engine = make_engine(url)
        try:
            with pytest.raises(DBAPIError) as info, engine.connect() as conn:
                conn.execute(text(sql), {"body": body})
        finally:
            engine.dispose()
        assert "hidden due to hide_parameters" in str(info.value)
        assert body[:BODY_LIMIT + 1] not in safe_text(info.value)
