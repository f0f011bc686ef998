"""Reading the two sides of a comparison, read only: whole-state documents keyed by FLID.

Every kind yields the documents as ``GET /all/flights`` serves them (deleted and code-share flights
left out), decoded from JSON so that both sides are plain Python values whatever they came from:

* ``postgresql+psycopg://``: an msgx state database, in one REPEATABLE READ, READ ONLY transaction
  (the server itself refuses a write in it), through the same repository ``GET /all/flights`` uses;
* ``redis://`` / ``rediss://``: one hash (``flightInfo`` by default), field FLID, value whole-state
  JSON, read with ``HSCAN`` (never a write command);
* ``http://`` / ``https://``: a running service's ``GET /all/flights``, with a bearer token taken
  from ``MSGX_COMPARE_TOKEN`` (never from the command line, where ``ps`` would show it).

Any failure to read a side is a ``SourceUnreadable`` with a one-line reason (exit 2), never an empty
side: an empty reference would make every flight "missing there" and hide the real cause.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import orjson
import redis
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.config import DEFAULT_REDIS_KEY
from msgx_engine.db import make_engine
from msgx_engine.redact import redact_urls, safe_text
from msgx_engine.state.serialize import state_json
from msgx_engine.store.flights import FlightRepository

TOKEN_ENV = "MSGX_COMPARE_TOKEN"
HTTP_TIMEOUT_S = 60.0
REDIS_SCAN_COUNT = 1000

Documents = dict[str, dict[str, Any]]


class SourceUnreadable(RuntimeError):
    """A side of the comparison could not be read; the message is the one-line reason."""


@dataclass(frozen=True)
class Side:
    """What was read: a label for the report (passwords removed) and the documents by FLID."""

    label: str
    documents: Documents


def kind_of(ref: str) -> str:
    """``postgresql``, ``redis`` or ``http`` from the URL's scheme; anything else is refused."""
    scheme = ref.split("://", 1)[0].lower() if "://" in ref else ""
    if scheme.startswith("postgresql"):
        return "postgresql"
    if scheme in ("redis", "rediss"):
        return "redis"
    if scheme in ("http", "https"):
        return "http"
    raise SourceUnreadable(
        f"--against {redact_urls(ref)!r} is not a postgresql+psycopg://, redis:// or http(s):// URL")


def read_reference(ref: str, *, key: str | None = None, token: str | None = None) -> Side:
    """The reference side. ``key``: the Redis hash (default ``flightInfo``); ``token``: the HTTP
    bearer token (default: ``MSGX_COMPARE_TOKEN`` from the environment)."""
    kind = kind_of(ref)
    if key is not None and kind != "redis":
        raise SourceUnreadable("--key names a Redis hash: it applies only to a redis:// reference")
    if kind == "postgresql":
        return read_postgresql(ref)
    if kind == "redis":
        return read_redis(ref, key or DEFAULT_REDIS_KEY)
    return read_http(ref, os.environ.get(TOKEN_ENV, "").strip() if token is None else token)


def read_postgresql(url: str) -> Side:
    """An msgx state database's current flights, in one read-only snapshot."""
    label = redact_urls(url)
    engine = make_engine(url, single=True, program_name="msgx compare")
    try:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            try:
                states = FlightRepository(conn).load_all_current()
                docs = {s.flid: orjson.loads(state_json(s)) for s in states}
            finally:
                conn.rollback()     # nothing to keep: the read-only transaction ends without a commit
    except SQLAlchemyError as exc:
        raise SourceUnreadable(f"cannot read the msgx database {label}: {_reason(exc)}") from exc
    finally:
        engine.dispose()
    return Side(label, docs)


def read_redis(url: str, key: str) -> Side:
    """One projection hash. A missing key is refused: Redis keeps no empty hash, so an absent key
    means a wrong key or database far more often than a reference with no flights."""
    label = f"{redact_urls(url)} hash {key}"
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30, decode_responses=False)
    try:
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "none":
            raise SourceUnreadable(f"Redis {label}: the key does not exist (check --key and the database number)")
        if kind != "hash":
            raise SourceUnreadable(f"Redis {label}: the key holds a {kind}, not a hash")
        raw = cast("dict[bytes, bytes]", dict(client.hscan_iter(key, count=REDIS_SCAN_COUNT)))
    except redis.RedisError as exc:
        raise SourceUnreadable(f"cannot read Redis {label}: {_reason(exc)}") from exc
    finally:
        client.close()
    docs: Documents = {}
    for field_name, value in raw.items():
        flid = field_name.decode("utf-8", "replace")
        docs[flid] = _document(value, f"Redis {label} field {flid!r}")
    return Side(label, docs)


def read_http(url: str, token: str | None) -> Side:
    """A service's ``GET /all/flights`` (the URL may name the service root or the endpoint)."""
    endpoint = url.rstrip("/")
    if not endpoint.endswith("/all/flights"):
        endpoint += "/all/flights"
    label = redact_urls(endpoint)
    request = urllib.request.Request(endpoint, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as resp:   # noqa: S310 (scheme checked)
            body = resp.read()
    except urllib.error.HTTPError as exc:
        hint = f" (set {TOKEN_ENV})" if exc.code in (401, 403) else ""
        raise SourceUnreadable(f"GET {label} answered {exc.code} {exc.reason}{hint}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise SourceUnreadable(f"cannot reach {label}: {_reason(exc)}") from exc
    try:
        listed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SourceUnreadable(f"GET {label} did not answer a JSON array: {exc}") from exc
    if not isinstance(listed, list):
        raise SourceUnreadable(f"GET {label} did not answer a JSON array of flights")
    docs: Documents = {}
    for i, doc in enumerate(listed):
        if not isinstance(doc, dict) or not isinstance(doc.get("FLID"), str):
            raise SourceUnreadable(f"GET {label}: item {i} is not a flight document with a FLID")
        docs[doc["FLID"]] = doc
    return Side(label, docs)


def _document(value: bytes, where: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise SourceUnreadable(f"{where} is not JSON: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise SourceUnreadable(f"{where} is not a JSON object")
    return dict(doc)


def _reason(exc: BaseException) -> str:
    """The first line of an error, without passwords: the refusal is one line."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return safe_text(f"{exc.__class__.__name__}: {text[0] if text else ''}")
