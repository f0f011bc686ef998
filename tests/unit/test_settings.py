"""Settings from the environment and startup refusal (DESIGN §4, OPS-1); no server."""

from __future__ import annotations

import logging
import os
import subprocess
from datetime import timedelta

from conftest import MSGX_BIN

from msgx_engine.config import Settings
from msgx_engine.delivery.projection import post_commit_hooks


def test_settings_read_ignore_rules_from_env(monkeypatch):
    """US-04: MSGX_IGNORE_RULES configures the list."""
    monkeypatch.setenv("MSGX_DB_URL", "postgresql://x/y")
    monkeypatch.setenv("MSGX_MAILBOX_URL", "mysql://x/y")
    monkeypatch.setenv("MSGX_IGNORE_RULES", "LDM-*, eror-*")
    assert Settings.from_env().ignore_rules == ("LDM-*", "eror-*")


def test_startup_refuses_half_a_configuration(tmp_path):
    """OPS-1: a mailbox URL without a state URL is refused with a clear message."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
    env.update(MSGX_MAILBOX_URL="mysql+pymysql://root@127.0.0.1:3306/nowhere", MSGX_HOME=str(tmp_path))
    proc = subprocess.run([MSGX_BIN, "pump", "--drain"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "MSGX_DB_URL is not set" in proc.stderr


def test_not_configured_is_reported(caplog):
    """DESIGN §4: without MSGX_REDIS_URL the projection step is reported as not configured and skipped."""
    with caplog.at_level(logging.INFO):
        assert post_commit_hooks(None) == []
    assert any("not configured" in r.message for r in caplog.records)


def test_d26_identity_window_is_read_like_24h_90m_2d(monkeypatch):
    """D26, DESIGN §4: MSGX_IDENTITY_WINDOW (default 24h) takes a whole number and s/m/h/d;
    anything else (no unit, zero, negative, fractions) refuses to start."""
    import pytest

    from msgx_engine.config import ConfigError

    monkeypatch.setenv("MSGX_DB_URL", "postgresql://x/y")
    monkeypatch.setenv("MSGX_MAILBOX_URL", "mysql://x/y")
    assert Settings.from_env().identity_window == timedelta(hours=24)
    for raw, window in (("24h", timedelta(hours=24)), ("90m", timedelta(minutes=90)), ("2d", timedelta(days=2)),
                        (" 3600S ", timedelta(hours=1))):
        monkeypatch.setenv("MSGX_IDENTITY_WINDOW", raw)
        assert Settings.from_env().identity_window == window
    for raw in ("24", "0h", "-1h", "1.5h", "1w", "h"):
        monkeypatch.setenv("MSGX_IDENTITY_WINDOW", raw)
        with pytest.raises(ConfigError, match="MSGX_IDENTITY_WINDOW"):
            Settings.from_env()


def test_ops3_mode_defaults_to_production_and_refuses_unknown_values(monkeypatch):
    """OPS-3, D29: MSGX_MODE is production unless set to shadow; any other value
    refuses to start."""
    import pytest

    from msgx_engine.config import ConfigError

    monkeypatch.setenv("MSGX_DB_URL", "postgresql://x/y")
    monkeypatch.setenv("MSGX_MAILBOX_URL", "mysql://x/y")
    monkeypatch.delenv("MSGX_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("MSGX_MODE", raising=False)
    assert Settings.from_env().mode == "production" and not Settings.from_env().shadow
    monkeypatch.setenv("MSGX_MODE", "Shadow")
    assert Settings.from_env().shadow
    for raw in ("prod", "dry-run", "shadowy"):
        monkeypatch.setenv("MSGX_MODE", raw)
        with pytest.raises(ConfigError, match="MSGX_MODE"):
            Settings.from_env()


def test_ops3_shadow_refuses_the_production_topic_names_when_kafka_is_set(monkeypatch):
    """OPS-3: shadow with Kafka configured refuses to start unless both
    MSGX_TOPIC_MSG and MSGX_TOPIC_SCHD differ from the defaults; without Kafka it starts."""
    import pytest

    from msgx_engine.config import ConfigError

    monkeypatch.setenv("MSGX_DB_URL", "postgresql://x/y")
    monkeypatch.setenv("MSGX_MAILBOX_URL", "mysql://x/y")
    monkeypatch.setenv("MSGX_MODE", "shadow")
    monkeypatch.delenv("MSGX_TOPIC_MSG", raising=False)
    monkeypatch.delenv("MSGX_TOPIC_SCHD", raising=False)
    monkeypatch.delenv("MSGX_KAFKA_BOOTSTRAP", raising=False)
    assert Settings.from_env().shadow                       # Kafka unset: nothing can be published
    monkeypatch.setenv("MSGX_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    with pytest.raises(ConfigError, match="MSGX_TOPIC_MSG='msg'.*MSGX_TOPIC_SCHD='schd'"):
        Settings.from_env()
    monkeypatch.setenv("MSGX_TOPIC_MSG", "shadow.msg")
    with pytest.raises(ConfigError, match="MSGX_TOPIC_SCHD='schd'"):
        Settings.from_env()
    monkeypatch.setenv("MSGX_TOPIC_SCHD", "shadow.schd")
    settings = Settings.from_env()
    assert (settings.topic_msg, settings.topic_schd) == ("shadow.msg", "shadow.schd")
    with pytest.raises(ConfigError, match="MSGX_TOPIC_MSG"):     # direct construction is held to it too
        Settings(db_url="x", mailbox_url="y", kafka_bootstrap="k:1", redis_url=None, mode="shadow")


def test_item6_no_silent_embedded_fallback_cli_refuses_without_urls(tmp_path):
    """`msgx pump`, `msgx serve` and the other commands with neither MSGX_DB_URL nor
    MSGX_EMBEDDED refuse to start (exit 2) with a message naming both ways out, and never start
    the embedded PostgreSQL (no data directory appears under MSGX_HOME)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
    env["MSGX_HOME"] = str(tmp_path)
    for argv in (["pump", "--drain"], ["serve", "--port", "1"], ["flights"], ["db", "upgrade"]):
        proc = subprocess.run([MSGX_BIN, *argv], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert "MSGX_DB_URL and MSGX_MAILBOX_URL are not set" in proc.stderr and "MSGX_EMBEDDED=1" in proc.stderr
    assert not (tmp_path / "pgdata").exists(), "the embedded server was started"


def test_item6_embedded_only_when_asked_for(monkeypatch, tmp_path):
    """Settings without URLs resolve to the embedded server only with MSGX_EMBEDDED=1
    (what `msgx demo` sets for the processes it starts); the refusal comes before any server starts."""
    import pytest

    from msgx_engine.config import ConfigError

    for key in [k for k in os.environ if k.startswith("MSGX_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MSGX_HOME", str(tmp_path))
    settings = Settings.from_env()
    assert settings.embedded and not settings.embedded_allowed
    with pytest.raises(ConfigError, match="MSGX_EMBEDDED=1"):
        settings.resolved()
    monkeypatch.setenv("MSGX_EMBEDDED", "1")
    assert Settings.from_env().embedded_allowed
    monkeypatch.setenv("MSGX_DB_URL", "postgresql+psycopg://x@127.0.0.1:1/y")
    monkeypatch.setenv("MSGX_MAILBOX_URL", "mysql+pymysql://x@127.0.0.1:1/y")
    monkeypatch.delenv("MSGX_EMBEDDED")
    assert Settings.from_env().resolved().db_url == "postgresql+psycopg://x@127.0.0.1:1/y"
    assert not (tmp_path / "pgdata").exists()
