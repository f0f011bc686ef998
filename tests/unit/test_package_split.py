"""A large package's later records are extracted by the helper process, and the snapshot gets
exactly the fields the pump alone extracts (decision P27; FS §3.3 D1 whole states, US-03
AC2 nothing dropped or changed on the way). Whatever goes wrong with the helper's part (a record
it cannot extract, a worker killed, a part that does not match, answers nobody read) the pump
extracts those records itself, with the same result or the same refusal."""

from __future__ import annotations

import marshal
from types import MappingProxyType

import pytest
from lxml import etree
from snapshot_builders import big_package, dnld, fltr, sodt

from msgx_engine.handlers.extract import Unmapped
from msgx_engine.handlers.snapshot import outline, package_flights
from msgx_engine.handlers.whole_record import whole_record_fields
from msgx_engine.pipeline.large_bodies import offload, package_split
from msgx_engine.pipeline.large_bodies.package_split import helper_part
from msgx_engine.sis.content_hash import content_hash
from msgx_engine.sis.decode import SisMessage, SisRefused
from msgx_engine.sis.decode import decode as plain_decode

N = 1200      # about 1.2 MB: over the hand-over size, so the worker takes it


pytestmark = pytest.mark.usefixtures("fresh_offload_worker")


def helped(body: str) -> offload.HandedOver:
    """As the pump decodes: a large body goes to the worker."""
    msg = plain_decode(body, hasher=offload.submit)
    assert isinstance(msg, offload.HandedOver), "the body was handed to the worker"
    return msg


def alone(body: str) -> tuple:
    return package_flights(plain_decode(body))


def prepared(msg: SisMessage) -> tuple:
    """What the snapshot route hands the handler (``prepared_flights``), or the handler's own
    reading when there is nothing prepared: the flights ``decide`` works on."""
    flids = outline(msg).flids
    return package_split.prepared_flights(msg, flids) or package_flights(msg, flids)


def shape(flights: tuple) -> set[str]:
    """The kinds of value the fields hold: frozen views only, never a dict."""
    kinds: set[str] = set()
    for _flid, fields in flights:
        kinds.add(type(fields).__name__)
        for value in fields.values():
            kinds.add(type(value).__name__)
            if isinstance(value, tuple):
                kinds |= {type(entry).__name__ for entry in value}
    return kinds


def package_with(bad_at: int, n: int = N) -> str:
    """A package whose record ``bad_at`` carries an element the catalogue does not place."""
    return dnld(*(fltr(f"F{i:06d}", sodt(9), gates=2, desks=3, routes=2, stands=2,
                       extra="<ZZZZ>1</ZZZZ>" if i == bad_at else "") for i in range(n)))


def test_the_worker_extracts_the_later_records_and_they_equal_the_pumps_own() -> None:
    body = big_package(N)
    msg = helped(body)
    part = msg.pending.flights()
    start = package_split.later_start(N)
    assert 0 < start < N and part[0] == start and len(part[1]) == N - start, "the worker sent its share"
    got = package_split.prepared_flights(msg, outline(msg).flids)
    assert got is not None and got == alone(body)
    assert [f for f, _ in got] == [f"F{i:06d}" for i in range(N)], "input order kept"
    assert shape(got) == {"mappingproxy", "str", "tuple"}
    assert msg.payload_hash == content_hash(msg.root), "the hash still comes after the records"


def test_records_the_one_pass_path_declines_are_extracted_exactly_by_the_worker_too() -> None:
    """A namespaced attribute sends a record to the exact path, which accepts it: in the worker's
    share as in the pump's, and the worker's part is still taken."""
    odd = '<FRET xmlns:x="urn:x" x:q="1" REID="A"/>'
    body = dnld(*(fltr(f"F{i:06d}", sodt(9), gates=2, desks=3, routes=2, stands=2,
                       extra=odd if i % 100 == 7 else "") for i in range(N)))
    msg = helped(body)
    part = msg.pending.flights()
    assert part is not None and package_split.taken(part, part[0], outline(msg).flids) is not None
    got = package_split.prepared_flights(msg, outline(msg).flids)
    assert got is not None and got == alone(body) and shape(got) == {"mappingproxy", "str", "tuple"}
    assert dict(got)[f"F{N - 93:06d}"]["FRET"] == {"REID": "A"}


def test_a_record_the_worker_cannot_extract_gets_the_pumps_verdict() -> None:
    """A bad record in the worker's share: it sends no records, nothing is prepared, and the
    handler refuses the package with the very words it uses alone (the first bad record decides)."""
    body = package_with(bad_at=N - 10)
    msg = helped(body)
    assert msg.pending.flights() is None
    assert package_split.prepared_flights(msg, outline(msg).flids) is None
    with pytest.raises(Unmapped) as helped_error:
        prepared(msg)
    with pytest.raises(Unmapped) as alone_error:
        alone(body)
    assert str(helped_error.value) == str(alone_error.value) and "ZZZZ" in str(alone_error.value)


def test_a_bad_record_in_the_pumps_share_is_refused_before_the_workers_part_is_read() -> None:
    body = package_with(bad_at=3)
    msg = helped(body)
    assert package_split.prepared_flights(msg, outline(msg).flids) is None
    with pytest.raises(Unmapped) as helped_error:
        prepared(msg)
    with pytest.raises(Unmapped) as alone_error:
        alone(body)
    assert str(helped_error.value) == str(alone_error.value)


def test_a_killed_worker_leaves_the_extraction_and_the_hash_to_the_pump() -> None:
    body = big_package(N)
    msg = helped(body)
    assert offload._worker is not None
    offload._worker.kill()
    offload._worker.wait()
    assert prepared(msg) == alone(body)
    assert msg.payload_hash == content_hash(msg.root)


def test_a_part_that_is_not_the_expected_one_is_not_taken() -> None:
    """``taken`` checks where the part starts, that it holds every later record and that its FLIDs
    are the outline's, in order: a part that fails any of these is extracted again by the pump."""
    body = big_package(N)
    msg = helped(body)
    part = msg.pending.flights()
    flids = outline(msg).flids
    start = part[0]
    assert package_split.taken(part, start, flids) is not None
    assert package_split.taken(part, start + 1, flids) is None
    assert package_split.taken((start, part[1][:-1]), start, flids) is None
    swapped = [*part[1][:5], part[1][6], part[1][5], *part[1][7:]]
    assert package_split.taken((start, swapped), start, flids) is None
    assert package_split.taken(None, start, flids) is None
    assert package_split.taken("garbage", start, flids) is None


def test_answers_nobody_read_are_skipped_and_that_body_does_its_own_work() -> None:
    """Bodies are numbered: the next body's answers are its own though the first one's were never
    read, and the first one, asked afterwards, extracts and hashes in place with the same result."""
    first_body, second_body = big_package(N), big_package(N + 100, prefix="G")
    first, second = helped(first_body), helped(second_body)
    assert prepared(second) == alone(second_body)
    assert second.payload_hash == content_hash(second.root)
    assert first.pending.flights() is None, "its answers were read past"
    assert prepared(first) == alone(first_body)
    assert first.payload_hash == content_hash(first.root)


def test_a_body_refused_after_the_hand_over_does_not_disturb_the_next() -> None:
    """The body goes to the worker before the parse (P27); a refused one leaves answers nobody
    reads, and the next body still gets its own."""
    broken = big_package(N).replace("</SCHD>", "</SCHDX>")
    with pytest.raises(SisRefused):
        plain_decode(broken, hasher=offload.submit)
    body = big_package(N)
    msg = helped(body)
    assert msg.pending.flights() is not None
    assert prepared(msg) == alone(body)
    assert msg.payload_hash == content_hash(msg.root)


def test_small_packages_and_other_bodies_are_not_shared() -> None:
    assert package_split.later_start(package_split.MIN_RECORDS - 1) == package_split.MIN_RECORDS - 1
    small = etree.fromstring(big_package(50).encode())
    assert helper_part(small) is None
    assert helper_part(etree.fromstring(b"<MSG><META/><FLOP/></MSG>")) is None


def test_plain_fields_frozen_again_are_the_frozen_fields() -> None:
    """What crosses the pipe (``frozen=False``, through ``marshal``) is frozen back into the very
    fields the pump builds, keys in the same order, views where the pump has views."""
    record = etree.fromstring(fltr("F000001", sodt(9), gates=2, desks=1, extra='<FRET REID="A">x</FRET>'))
    frozen = whole_record_fields(record)
    again = package_split.freeze(marshal.loads(marshal.dumps(dict(whole_record_fields(record, frozen=False)))))
    assert again == frozen and list(again) == list(frozen)
    assert type(again["GTDT"][0]) is MappingProxyType and type(again["FRET"]) is MappingProxyType
