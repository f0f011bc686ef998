"""A binding holds the first kind of content hash (every binding before P28, and bodies under
1 MB since) or the second (bodies of 1 MB or more since P28, ``sis/content_hash.py``). A resend
whose hash is of the other kind is still a duplicate, and other content under the identity still
a conflict (INV-9, US-03 AC3, D26)."""

from __future__ import annotations

from builders import gtdt
from snapshot_builders import pump, query, status
from sqlalchemy import text

from msgx_engine.sis.content_hash import KIND, content_hash
from msgx_engine.sis.decode import parse_xml


def test_inv9_a_binding_of_the_other_kind_still_tells_duplicates_from_conflicts(app) -> None:
    first = gtdt("F1", (1, "A1"), seqn=77, dttm="20210123080000")
    (m1,) = pump(app, first)
    assert status(app, m1) == ("SUCCEEDED", None)
    (stored,) = query(app, "SELECT payload_hash FROM msg_identity WHERE msg_id = :m", m=m1)[0]
    assert len(stored) == 64, "a small body is bound with the first kind"
    with app.engine.begin() as conn:              # as a large body's binding holds it
        conn.execute(text("UPDATE msg_identity SET payload_hash = :h WHERE msg_id = :m"),
                     {"h": content_hash(parse_xml(first)), "m": m1})
    assert query(app, "SELECT payload_hash FROM msg_identity WHERE msg_id = :m", m=m1)[0][0].startswith(KIND)

    (m2,) = pump(app, gtdt("F1", (1, "A1"), seqn=77, dttm="20210123090000"))
    assert status(app, m2) == ("SKIPPED", "duplicate")
    (m3,) = pump(app, gtdt("F1", (1, "B9"), seqn=77, dttm="20210123100000"))
    assert status(app, m3) == ("SKIPPED", "identity_conflict")
    assert query(app, "SELECT gate FROM flight_gate WHERE flid = 'F1'") == [("A1",)]
