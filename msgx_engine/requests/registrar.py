"""The ``SyncRegistrar`` behind ``POST /schd/sync`` (US-08 AC6, C-33, Q17).

It only registers: the request tracking job (or ``msgx request track``) writes it to COUTMSGS.
So the answer says REGISTERED with the request id and operating day, and nothing about the plan
being updated: the promise ends at the mailbox even once sent (C-24), and the plan changes only
when the AODB's SCHD RESP arrives and is applied (US-06).
"""

from __future__ import annotations

from msgx_engine.http.schd_sync import SyncWindow
from msgx_engine.requests.tracker import RequestTracker


class RqfdSyncRegistrar:
    """Registers one RQFD for the validated window (the window start's date is the requested day)."""

    def __init__(self, tracker: RequestTracker) -> None:
        self.tracker = tracker

    def register(self, window: SyncWindow) -> object:
        doc = self.tracker.register_rqfd(window.start, window.end).as_json()
        doc["note"] = ("registered: the request is written to the AODB mailbox by request tracking; "
                       "the flight plan is not updated until the AODB answers")
        return doc
