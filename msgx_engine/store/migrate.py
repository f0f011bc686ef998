"""Apply and revert msgx's own schema with Alembic, configured in code."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        cfg = alembic_config(engine.url.render_as_string(hide_password=False))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    with engine.begin() as conn:
        cfg = alembic_config(engine.url.render_as_string(hide_password=False))
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()
    assert head is not None, "the migration chain has a head"
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def is_current(engine: Engine) -> bool:
    """True when the database is at the code's head revision (startup refusal, OPS-1)."""
    return current_revision(engine) == head_revision()
