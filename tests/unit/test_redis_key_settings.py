"""The Redis projection's hash name (``MSGX_REDIS_KEY``) and the shadow's refusal of production's
hash (OPS-3): a shadow given production's Redis must never write its ``flightInfo``. No server."""

from __future__ import annotations

import pytest

from msgx_engine.config import DEFAULT_REDIS_KEY, ConfigError, Settings

BASE = dict(db_url="postgresql+psycopg://x/y", mailbox_url="mysql+pymysql://x/y", kafka_bootstrap=None)


def test_the_key_defaults_to_flightinfo_and_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("MSGX_DB_URL", BASE["db_url"])
    monkeypatch.setenv("MSGX_MAILBOX_URL", BASE["mailbox_url"])
    monkeypatch.delenv("MSGX_REDIS_KEY", raising=False)
    monkeypatch.delenv("MSGX_MODE", raising=False)
    assert Settings.from_env().redis_key == DEFAULT_REDIS_KEY == "flightInfo"
    monkeypatch.setenv("MSGX_REDIS_KEY", "  flightInfo_b  ")
    assert Settings.from_env().redis_key == "flightInfo_b"


def test_a_shadow_with_redis_and_production_key_is_refused(monkeypatch):
    """OPS-3: refused however Settings are built (environment or code), naming the variable."""
    with pytest.raises(ConfigError, match="MSGX_REDIS_KEY='flightInfo' is production's hash"):
        Settings(**BASE, redis_url="redis://127.0.0.1:6379/0", mode="shadow")
    monkeypatch.setenv("MSGX_DB_URL", BASE["db_url"])
    monkeypatch.setenv("MSGX_MAILBOX_URL", BASE["mailbox_url"])
    monkeypatch.setenv("MSGX_MODE", "shadow")
    monkeypatch.setenv("MSGX_REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.delenv("MSGX_REDIS_KEY", raising=False)
    with pytest.raises(ConfigError, match="set MSGX_REDIS_KEY to a key of its own"):
        Settings.from_env()
    monkeypatch.setenv("MSGX_REDIS_KEY", "shadow:flightInfo")
    assert Settings.from_env().redis_key == "shadow:flightInfo"


def test_allowed_combinations():
    """A shadow without Redis, and production with the default key, start as before."""
    assert Settings(**BASE, redis_url=None, mode="shadow").redis_key == "flightInfo"
    assert Settings(**BASE, redis_url="redis://h/0").redis_key == "flightInfo"
    with pytest.raises(ConfigError, match="MSGX_REDIS_KEY is empty"):
        Settings(**BASE, redis_url="redis://h/0", redis_key=" ")
