"""POST /schd/sync validation and its extension point, the OpenAPI description, the documented
error table, and the loopback-only startup rule (US-08 AC6, C-33, US-02 AC3/AC4, US-12, Q3)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from msgx_engine.config import ConfigError
from msgx_engine.http.errors import ERROR_CODES, ApiError
from msgx_engine.http.schd_sync import SyncWindow, parse_window
from msgx_engine.http.server import check_bind, is_loopback

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"


def sync(client, payload, ctype="application/json"):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return client.post("/schd/sync", content=body, headers={"Content-Type": ctype})


# --- pure validation ------------------------------------------------------------------------
@pytest.mark.parametrize(("start", "end", "expected"), [
    ("2021-01-23 00:00", "2021-01-23 23:59", (datetime(2021, 1, 23, 0, 0), datetime(2021, 1, 23, 23, 59))),
    ("2021-01-23 13:05:09", "2021-01-23T21:00:00",
     (datetime(2021, 1, 23, 13, 5, 9), datetime(2021, 1, 23, 21, 0, 0))),
    (" 2021-01-23 08:00 ", "2021-01-23 08:00", (datetime(2021, 1, 23, 8), datetime(2021, 1, 23, 8))),
])
def test_parse_window_accepts_24_hour_times(start, end, expected):
    """US-08 AC6: 24-hour times in the documented format; start == end is a valid window."""
    assert parse_window({"startDate": start, "endDate": end}) == SyncWindow(*expected)


@pytest.mark.parametrize(("doc", "code"), [
    ([], "invalid_json"),
    ("2021-01-23 00:00", "invalid_json"),
    ({"endDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": "", "endDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": "   ", "endDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": None, "endDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": 1611360000, "endDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": "2021-01-23 01:00 PM", "endDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": "2021-01-23 24:00", "endDate": "2021-01-24 10:00"}, "invalid_field"),
    ({"startDate": "2021-02-30 10:00", "endDate": "2021-03-01 10:00"}, "invalid_field"),
    ({"startDate": "23JAN210800", "endDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": "2021-01-23", "endDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": "2021-01-23 10:00", "endDate": "2021-01-23 09:59:59"}, "invalid_range"),
    ({"startDate": "2021-09-11 12:00", "endDate": "2021-09-12 06:00"}, "invalid_range"),
    ({"startDate": "1999-12-31 08:00", "endDate": "1999-12-31 09:00"}, "invalid_range"),
    ({"startDate": "2100-01-01 08:00", "endDate": "2100-01-01 09:00"}, "invalid_range"),
])
def test_parse_window_refusals(doc, code):
    """US-08 AC6 (非空/区间校验, 24 小时制): missing, empty, 12-hour, impossible and reversed
    windows; D23: a window spanning days and years outside 2000-2099 (SIS two-digit years)."""
    with pytest.raises(ApiError) as info:
        parse_window(doc)
    assert info.value.code == code


# --- endpoint ---------------------------------------------------------------------------------








# --- description and documentation ----------------------------------------------------------


def test_documented_error_table_matches_the_code():
    """US-02 AC3 (错误码表): docs/http-api.md lists exactly the codes and statuses the app uses."""
    rows = re.findall(r"^\| `([a-z_0-9]+)` \| (\d{3}) \|", DOC.read_text("utf-8"), re.MULTILINE)
    assert dict((code, int(status)) for code, status in rows) == {c: e.status for c, e in ERROR_CODES.items()}
    assert len(rows) == len(ERROR_CODES)


# --- bind rule --------------------------------------------------------------------------------
@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("192.168.1.1", False),
    ("no-such-host.invalid", False),
])
def test_loopback_detection(host, loopback):
    """US-02 AC4 (内网信任边界): only addresses that are all loopback count as loopback."""
    assert is_loopback(host) is loopback


def test_public_bind_needs_explicit_permission():
    """US-02 AC4: a non-loopback bind is refused unless allow_public; allow_public
    is refused without an API token (and without TLS: tests/unit/test_http_tls.py)."""
    with pytest.raises(ConfigError, match="--allow-public"):
        check_bind("0.0.0.0", allow_public=False)
    with pytest.raises(ConfigError, match="MSGX_API_TOKEN"):
        check_bind("0.0.0.0", allow_public=True)
    check_bind("0.0.0.0", allow_public=True, token="t", tls=True)
    check_bind("127.0.0.1", allow_public=False)






