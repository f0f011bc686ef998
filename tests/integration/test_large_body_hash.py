"""A package over 1 MB goes through the real pump with its canonical hash from the worker process
(decision P17, ``pipeline/large_bodies/offload.py``) and keeps every identity rule (INV-9, US-03 AC3, D26): the stored
hash is the one computed in place, a resend with a new DTTM is SKIPPED(duplicate) whether its hash
came from the worker or was computed in place, and other content under the same identity is an
identity conflict."""

from __future__ import annotations

import pytest
from snapshot_builders import dnld, fltr, pump, query, sodt, status

from msgx_engine.pipeline.large_bodies import offload
from msgx_engine.sis.content_hash import content_hash
from msgx_engine.sis.decode import parse_xml

SEQN = 420_001


def package(dttm: str, *, stnd: str = "504") -> str:
    records = [fltr(f"L{i:05d}", sodt(9, hhmm=f"{(i // 60) % 24:02d}{i % 60:02d}"), stnd=stnd, gates=2, desks=3,
                    routes=2, stands=2) for i in range(1200)]
    body = dnld(*records, seqn=SEQN, dttm=dttm)
    assert len(body.encode()) >= offload.OFFLOAD_BYTES
    return body


def stored_hash(app, msg_id: int) -> str:
    return query(app, "SELECT payload_hash FROM proc_state WHERE msg_id = :m", m=msg_id)[0][0]


def test_large_packages_keep_the_identity_rules_with_the_worker_hash(app, monkeypatch: pytest.MonkeyPatch) -> None:
    offload.shutdown()
    first, resend, again, other = (package("20260908220000"), package("20260908230000"), package("20260909000000"),
                                   package("20260909010000", stnd="999"))
    (m1,) = pump(app, first)
    assert status(app, m1) == ("SUCCEEDED", None)
    assert offload._worker is not None, "the package was handed to the worker"
    assert stored_hash(app, m1) == content_hash(parse_xml(first))
    assert query(app, "SELECT count(*) FROM flight_schd")[0][0] == 1200

    (m2,) = pump(app, resend)                               # hashed by the worker
    assert status(app, m2) == ("SKIPPED", "duplicate")

    monkeypatch.setattr(offload, "OFFLOAD_BYTES", 1 << 40)  # hashed in place: still the same content
    (m3,) = pump(app, again)
    assert status(app, m3) == ("SKIPPED", "duplicate")

    monkeypatch.undo()
    (m4,) = pump(app, other)
    assert status(app, m4) == ("SKIPPED", "identity_conflict")
    assert query(app, "SELECT count(*) FROM flight_schd WHERE stnd = '999'")[0][0] == 0
