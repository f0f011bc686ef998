"""Requests another installation sent, taken from the mailbox (decision L16, verdicts from the mailbox).

Every installation reads the same mailbox: the AODB's answers in CMINMSGS and every request any
installation wrote to COUTMSGS. A shadow during a parallel run, the old installation after a
rollback and a restored one after ``msgx recover`` did not send the requests the rows they process
answer; reading those requests from COUTMSGS (the window, the day, the SEQN, and DTTM, the
sender's clock at sending, which is also the sender's ``sent_at``) lets them match the answer to
the same request with the same window and judge it by the same times as the installation that sent
it. The intake does this on every pass, before the rows it registers are processed. It reads the
COUTMSGS rows above the largest id it has read in this process (at first: the largest one its
``req_track`` holds), and of them only the newest requests (an answer is matched to the newest
requests only), so a pass costs a primary-key read of the rows written since the last one.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import Connection

from msgx_engine.handlers.answers import TIMEOUT_S
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.sis import requests as sis
from msgx_engine.store import requests as store

log = logging.getLogger(__name__)

NEWEST = 20          # as many as the answer matcher looks at (``store.requests.answer_candidates``)


def adopt_sent(conn: Connection, mailbox: Mailbox, now: datetime, read_upto: int | None) -> int:
    """Record the requests in COUTMSGS above ``read_upto`` (None: above the largest COUTMSGS id
    this installation holds) that it did not write itself. The largest COUTMSGS id read."""
    after = store.adoption_position(conn) if read_upto is None else read_upto
    top, rows = mailbox.requests_after(after, tuple(sis.ROUTING.values()), NEWEST)
    if rows:
        own = set() if mailbox.read_only else store.being_sent(conn)
        found = [r for r in (sis.read_sent(i, body) for i, body in rows) if r is not None]
        adopted = store.adopt(conn, [r for r in found if (r.rtype, r.styp, r.seqn) not in own], now, TIMEOUT_S)
        if adopted:
            log.info("requests sent by another installation taken from the mailbox: %s", adopted)
    return top
