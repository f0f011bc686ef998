"""The probes of ``msgx serve``: ``GET /healthz`` (the process is up) and ``GET /readyz`` (both
databases answer and the state schema is the code's).

A load balancer or an orchestrator asks these every few seconds and must get an answer in a few
seconds whatever the databases do, so readiness runs in a worker thread under a deadline: a
database that hangs makes the probe answer 503 "timed out" at the deadline instead of hanging
with it. Only one check runs at a time; while one is still waiting for a hung database, further
probes answer 503 at once rather than piling up threads and connections behind it. The reasons
are short and classified (which database, what kind of error), never a URL or a password: the
probes need no token.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from msgx_engine.mailbox.adapter import Mailbox, MailboxError
from msgx_engine.store import migrate

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 3.0

ReadinessCheck = Callable[[], "str | None"]


def readiness_check(engine: Engine, mailbox: Mailbox) -> ReadinessCheck:
    """None when msgx can work (state database reachable at the code's schema revision, mailbox
    reachable with its tables), else the reason in one line."""

    def check() -> str | None:
        try:
            current, head = migrate.current_revision(engine), migrate.head_revision()
        except SQLAlchemyError as exc:
            return f"state database unreachable ({exc.__class__.__name__})"
        if current != head:
            return f"state database schema is at revision {current!r}, this msgx needs {head!r}: run msgx db upgrade"
        try:
            mailbox.check_schema()
        except SQLAlchemyError as exc:
            return f"mailbox unreachable ({exc.__class__.__name__})"
        except MailboxError:
            return "mailbox lacks its cminmsgs/coutmsgs tables"
        return None

    return check


class Readiness:
    """``check`` run off the event loop, at most one at a time, answered within ``timeout_s``."""

    def __init__(self, check: ReadinessCheck, timeout_s: float = READY_TIMEOUT_S) -> None:
        self.check = check
        self.timeout_s = timeout_s
        self._busy = threading.Lock()     # held by the thread running the check, released when it returns

    def _run(self) -> str | None:
        try:
            return self.check()
        finally:
            self._busy.release()

    async def reason(self) -> str | None:
        if not self._busy.acquire(blocking=False):
            return "an earlier readiness check is still waiting for a database"
        task = asyncio.ensure_future(run_in_threadpool(self._run))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())   # a late failure is not "never retrieved"
        try:
            # shield: at the deadline the probe answers; the thread finishes (and frees the lock) on its own
            return await asyncio.wait_for(asyncio.shield(task), self.timeout_s)
        except TimeoutError:
            log.warning("readiness check timed out after %.1f s", self.timeout_s)
            return f"a database did not answer within {self.timeout_s:g} s"


def healthz(request: Request) -> Response:
    """The process is up and serving: no database is asked."""
    return JSONResponse({"status": "ok"})


def readyz_endpoint(readiness: Readiness):
    async def readyz(request: Request) -> Response:
        reason = await readiness.reason()
        if reason is None:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)

    return readyz
