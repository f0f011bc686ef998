"""Composition root: builds engines, adapters and the pump from Settings (one place)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.clock import Clock, DatabaseClock
from msgx_engine.config import ConfigError, Settings
from msgx_engine.db import make_engine
from msgx_engine.delivery.projection import Projection, connect, post_commit_hooks
from msgx_engine.mailbox.adapter import Mailbox, MailboxError
from msgx_engine.mailbox.lock import MailboxLock
from msgx_engine.monitor import names
from msgx_engine.monitor.alerts import Alerter
from msgx_engine.monitor.checks import CHECKS, CheckResult, Drift
from msgx_engine.monitor.figures import figures
from msgx_engine.operations.archive import ArchivePolicy, Archiver
from msgx_engine.pipeline.backfill import Backfill
from msgx_engine.pipeline.intake import Intake
from msgx_engine.pipeline.outcomes import PostCommitHook
from msgx_engine.pipeline.protocol import Processor
from msgx_engine.pipeline.pump import Pump, PumpOptions, compose_pump
from msgx_engine.pipeline.source import BodySource
from msgx_engine.store import migrate, version_floor
from msgx_engine.store.release_signal import ReleaseNotifier


@dataclass
class App:
    settings: Settings
    engine: Engine
    mailbox: Mailbox
    clock: Clock
    post_commit: list[PostCommitHook] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, clock: Clock | None = None) -> App:
        settings = (settings or Settings.from_env()).resolved()
        assert settings.db_url and settings.mailbox_url
        engine = make_engine(settings.db_url)
        mailbox = Mailbox(settings.mailbox_url, read_only=settings.shadow)   # D29, shadow mode: shadow never writes it
        # Redis projection between transaction 1 and 2 (INV-23); none when MSGX_REDIS_URL is unset.
        return cls(settings, engine, mailbox, clock or DatabaseClock(engine),
                   post_commit=post_commit_hooks(settings.redis_url, key=settings.redis_key))

    def check_ready(self) -> None:
        """Startup refusal (OPS-1): unreachable servers, missing migrations or mailbox tables stop us."""
        try:
            if not migrate.is_current(self.engine):
                raise ConfigError(
                    f"state database is at revision {migrate.current_revision(self.engine)!r}, code expects "
                    f"{migrate.head_revision()!r}: run `msgx db upgrade` first")
        except SQLAlchemyError as exc:
            raise ConfigError(f"state database unreachable: {exc.__class__.__name__}: {exc}") from exc
        if self.settings.shadow:
            self._refuse_production_state()
        try:
            self.mailbox.check_schema()
        except SQLAlchemyError as exc:
            raise ConfigError(f"mailbox {self.mailbox.where} unreachable: {exc.__class__.__name__}: {exc}") from exc
        except MailboxError as exc:
            raise ConfigError(str(exc)) from exc

    def _refuse_production_state(self) -> None:
        """A shadow never processes into production's state database (OPS-3): it would run beside
        production's pump on the same flights. The database's own history tells (``shadow_start``)."""
        from msgx_engine.operations.shadow_start import production_evidence

        with self.engine.connect() as conn:
            why = production_evidence(conn)
        if why is not None:
            raise ConfigError(
                f"MSGX_MODE=shadow, but MSGX_DB_URL is a production installation's state database: {why}. A shadow "
                "needs a state database of its own: point MSGX_DB_URL at an empty one (`msgx db upgrade`)")

    def processor(self) -> Processor:
        s = self.settings
        floors = version_floor.any_floor(self.engine)
        return Processor(BodySource(self.mailbox), self.clock, ignore_rules=s.ignore_rules,
                         gap_grace_s=s.gap_grace_s, max_body_bytes=s.max_body_bytes, post_commit=list(self.post_commit),
                         split_transactions=s.split_transactions, identity_window=s.identity_window,
                         max_record_bytes=s.kafka_max_record_bytes, version_floors=floors)

    def release_notifier(self) -> AbstractContextManager[ReleaseNotifier | None]:
        """The pump's announcement of its releases to a dispatcher process (P19, release NOTIFY), for a pump with no
        inline dispatcher; none without Kafka, where no dispatcher runs to hear it."""
        return ReleaseNotifier(self.engine) if self.settings.kafka_bootstrap else nullcontext()

    def pump(self, options: PumpOptions | None = None, **kw) -> Pump:
        intake = Intake(self.mailbox, self.clock, batch=self.settings.intake_batch)
        return compose_pump(self.engine, self.processor(), intake, Backfill(self.mailbox, self.clock), options,
                            mailbox_lock=self.mailbox_lock(), **kw)

    @property
    def mode(self) -> str:
        """``production`` or ``shadow`` (MSGX_MODE, D29): shown in /metrics and in alert texts."""
        return self.settings.mode

    def rebuild_projection(self) -> int | None:
        """Replace the Redis projection on this configuration's key with PostgreSQL's current
        flights; the number of flights written (None: no Redis configured)."""
        if not self.settings.redis_url:
            return None
        client = connect(self.settings.redis_url)
        try:
            return Projection(client, self.settings.redis_key).rebuild(self.engine)
        finally:
            client.close()

    def projection_drift(self) -> Drift | None:
        """Compare the Redis projection with PostgreSQL (None: no Redis configured)."""
        if not self.settings.redis_url:
            return None
        client = connect(self.settings.redis_url)
        try:
            drift = Projection(client, self.settings.redis_key).drift(self.engine)
        finally:
            client.close()
        return Drift(total=drift.total, metadata=dict(drift.as_metadata()))

    def check(self, name: str) -> CheckResult:
        """One health check now, without alerting (a check clicked in the Dagster UI)."""
        drift = self.projection_drift() if name == names.PROJECTION_DRIFT else None
        f = replace(figures(self.engine, self.mailbox), kafka_configured=bool(self.settings.kafka_bootstrap))
        return CHECKS[name](f, drift)

    def alerter(self, **kw) -> Alerter:
        """The scheduled health-check evaluation with alerting on state changes (OPS-2)."""
        return Alerter(self.engine, webhook_url=self.settings.alert_webhook, mode=self.mode,
                       drift_probe=self.projection_drift, mailbox=self.mailbox,
                       kafka_configured=bool(self.settings.kafka_bootstrap), **kw)

    def mailbox_lock(self) -> MailboxLock | None:
        """One installation per mailbox: the pump's lock on the mailbox server. Shadow mode (D29,
        ``MSGX_MODE=shadow``: a second installation that never writes to the mailbox) runs
        without it, so it can run beside production."""
        if self.settings.shadow:
            return None
        assert self.settings.mailbox_url
        return MailboxLock(self.settings.mailbox_url)

    def archiver(self) -> Archiver:
        """Archiving, with the Redis projection told about retired and purged flights when configured."""
        projection = (Projection(connect(self.settings.redis_url), self.settings.redis_key)
                      if self.settings.redis_url else None)
        return Archiver(self.engine, self.clock, projection=projection)

    def archive_policy(self, older_than: timedelta | None = None, batch: int = 1000) -> ArchivePolicy:
        s = self.settings
        return ArchivePolicy(older_than=s.archive_after if older_than is None else older_than,
                             identity_window=s.identity_window, purge_after=s.purge_after,
                             ledger_retention=s.ledger_retention, batch=batch)

    def dispose(self) -> None:
        self.engine.dispose()
        self.mailbox.dispose()
