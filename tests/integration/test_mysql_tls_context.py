"""MariaDB connections share one TLS context for PyMySQL's preferred mode.

Building the context loads the system's CA certificates (about 25 ms of CPU), which every Dagster
run and pump start paid for each mailbox connection it opened. The mode does not change: a
connection given no TLS options still uses TLS when the server offers it and does not check the
certificate; one given TLS options builds its own context from them.
"""

from __future__ import annotations

from msgx_engine.db import _pymysql_connection_class, make_engine


def test_connections_without_tls_options_share_one_context(mailbox_url):
    engines = [make_engine(mailbox_url, autocommit=True, single=True) for _ in range(2)]
    contexts = []
    try:
        for engine in engines:
            with engine.connect() as conn:
                assert conn.exec_driver_sql("SELECT 1").scalar() == 1
                raw = conn.connection.driver_connection
                assert raw.ssl and not raw._ssl_required          # still the preferred mode
                contexts.append(raw.ctx)
    finally:
        for engine in engines:
            engine.dispose()
    assert contexts[0] is not None and contexts[0] is contexts[1]


def test_explicit_tls_options_build_their_own_context():
    cls = _pymysql_connection_class()
    shared = cls(defer_connect=True).ctx
    own = cls(defer_connect=True, ssl={"verify_mode": "none"})
    assert own.ctx is not shared and own._ssl_required        # asked for: required, as PyMySQL does
    assert cls(defer_connect=True).ctx is shared
