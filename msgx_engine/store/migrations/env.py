"""Alembic environment: the URL and connection come from msgx, never from alembic.ini."""

from alembic import context
from sqlalchemy import create_engine, pool

from msgx_engine.store.tables import metadata

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url")
    assert url, "alembic needs sqlalchemy.url (msgx_engine.store.migrate sets it)"
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():  # pragma: no cover - offline SQL generation is not used
    raise SystemExit("msgx migrations run online only")
run_migrations_online()
