"""Author the golden five-face case inputs (US-05 AC2): ``python tests/golden/make_cases.py``.

Writes ``<STYP>/<case>.case.json`` (+ ``.N.xml`` message files) for every FLOP subtype, FDEL,
SCHD-ADFT, the code-share family and the stand -> airbridge mapping (ABDG). The expected faces
(``.expected.json``) are produced by running the real pipeline
(``MSGX_GOLDEN_REGEN=1 pytest tests/integration/test_flop_golden.py``) and must be reviewed, not
trusted. Inputs are rewritten only by this script, so a diff of a case file is a deliberate change.
The output depends on nothing but this script, the catalogue and the samples: every message file
carries ``<SEQN>1</SEQN>`` (the runner gives each message its own), so adding a case or a subtype
adds files and rewrites none of the others. ``--out DIR`` writes into another folder (the unit
test compares such a run with the committed cases).
The hand-written cases (``hand_*``, ``"written_by": "hand"``) are not this script's: it leaves them
alone, and the regeneration run never rewrites their expected faces.

Per subtype: every sample of tests/data/sis-samples over a prior state holding an old value;
``present`` when no sample exists; ``empty`` (D7 Clear) where no sample shows a clear; ``absent``
(no payload: no-op); ``zero_sequence`` / ``zero_mixed`` for groups with a sequence attribute;
``duplicate`` (same message twice: SKIPPED duplicate); ``unknown_flight`` (created, fday NULL).
A few cross-cutting cases (deleted flight, same value, code-share child, foreign elements) sit
under the subtype they use.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(REPO), str(HERE.parent)]

from builders import envelope, flop  # noqa: E402

from msgx_engine.handlers.flop import SUBTYPE_ELEMENTS  # noqa: E402
from msgx_engine.sis.fields import (  # noqa: E402
    COLLECTION_BY_KEY,
    OBJECT_BY_KEY,
    TEXT_GROUP_BY_KEY,
)

HAND_PREFIX = "hand_"   # hand-written cases (tests/golden/README.md): never written or removed here
SAMPLES = REPO / "tests" / "data" / "sis-samples"   # the public samples, copied in (see its README)
BASE = {"ALCD": "CA", "FLNO": "CA101", "MVIN": "A", "SODT": "12DEC031345"}
FLID = "15"
OLD_OBJECTS = {
    "FDIV": {"DDES": "PEK", "DDIR": "FROM", "TEXT": "OLD REASON"},
    "FRET": {"REID": "A", "TEXT": "OLD REASON"},
    "FLAB": {"ARES": "O", "TEXT": "OLD REASON"},
}
NEW_OBJECTS: dict[str, dict[str, str]] = {}
# Groups whose entries must be valid to be accepted (PORT keys its entries by POID O/C).
OLD_GROUPS = {"PORT": [{"POID": "C", "POTM": "01JAN210000"}]}
NEW_GROUPS = {"PORT": [{"POTM": "10AUG181855", "POID": "O"}]}


def group_spec(key: str):
    return COLLECTION_BY_KEY.get(key) or TEXT_GROUP_BY_KEY.get(key)


def old_value(key: str) -> object:
    if key in OBJECT_BY_KEY:
        return OLD_OBJECTS[key]
    if key in OLD_GROUPS:
        return OLD_GROUPS[key]
    spec = group_spec(key)
    if spec is None:
        return f"OLD{key}"
    parts = spec.children or spec.attrs
    entry = {parts[0]: "OLD"}
    if spec.seq_attr:
        entry[spec.seq_attr] = "1"
    if getattr(spec, "text", False):
        entry["TEXT"] = "old text"
    return [entry]


def prior(flid: str = FLID, *, with_old: tuple[str, ...] = (), version: int = 3, **extra) -> dict:
    doc = {"FLID": flid, "STATE_VERSION": version, **BASE}
    for key in with_old:
        doc[key] = old_value(key)
    doc.update(extra)
    return doc


def element(key: str, value: object) -> str:
    """SIS XML for one payload value (scalar text, object or list of group entries)."""
    if value is None:
        return f"\t\t<{key}></{key}>\n"
    if isinstance(value, str):
        return f"\t\t<{key}>{value}</{key}>\n"
    entries = [value] if isinstance(value, dict) else value
    out = ""
    for e in entries:
        spec = OBJECT_BY_KEY.get(key) or group_spec(key)
        attr_names = set(getattr(spec, "attrs", ())) | {getattr(spec, "seq_attr", None)}
        attrs = "".join(f' {k}="{v}"' for k, v in e.items() if k in attr_names)
        inner = "".join(f"<{k}>{v}</{k}>" for k, v in e.items() if k not in attr_names and k != "TEXT")
        out += f"\t\t<{key}{attrs}>{e.get('TEXT', '')}{inner}</{key}>\n"
    return out


def new_value(key: str) -> object:
    if key in OBJECT_BY_KEY:
        return NEW_OBJECTS.get(key) or {**OLD_OBJECTS[key], "TEXT": "NEW REASON"}
    if key in NEW_GROUPS:
        return NEW_GROUPS[key]
    spec = group_spec(key)
    if spec is None:
        return f"NEW{key}"
    parts = spec.children or spec.attrs
    entries = []
    for n, seq in ((1, "1"), (2, "3")):
        e = {p: f"V{n}{p}" for p in parts[:2]}
        if spec.seq_attr:
            e = {spec.seq_attr: seq, **e}
        if getattr(spec, "text", False):
            e["TEXT"] = f"text {n}"
        entries.append(e)
    return entries


class Writer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0

    def case(self, styp: str, name: str, doc: str, spec: list[str], prior_states: list[dict],
             messages: list[dict | str]) -> None:
        folder = self.root / styp
        folder.mkdir(parents=True, exist_ok=True)
        refs = []
        for n, m in enumerate(messages, start=1):
            if isinstance(m, str):
                # The runner assigns SEQNs; a fixed one here keeps a file independent of how many
                # messages the builders made before it (their counter runs across all cases).
                m = re.sub(r"<SEQN>\d+</SEQN>", "<SEQN>1</SEQN>", m)
                (folder / f"{name}.{n}.xml").write_text(m, encoding="utf-8", newline="\n")
                refs.append({"file": f"{name}.{n}.xml"})
            else:
                refs.append(m)
        body = {"doc": doc, "spec": spec, "prior": prior_states, "messages": refs}
        (folder / f"{name}.case.json").write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n",
                                                  encoding="utf-8", newline="\n")
        self.count += 1


def flop_samples() -> dict[str, list[str]]:
    by_styp: dict[str, list[str]] = {}
    with open(SAMPLES / "INDEX.tsv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row["TYPE"] == "FLOP":
                by_styp.setdefault(row["STYP"], []).append(row["file"])
    return by_styp


def sample_flid(path: str) -> str:
    text = (SAMPLES / path).read_text(encoding="utf-8")
    return text.split("<FLID>", 1)[1].split("</FLID>", 1)[0].strip()


def payload(styp: str, values: dict[str, object]) -> str:
    return "".join(element(k, v) for k, v in values.items())


DERIVED_NOTE = {"MAFL": " (MAFL is derived from the children's MAID, D30: a carried MAFL is checked, not stored)"}


def subtype_cases(w: Writer, styp: str, samples: list[str]) -> None:
    keys = SUBTYPE_ELEMENTS[styp]
    note = DERIVED_NOTE.get(styp, "")
    present = {k: new_value(k) for k in keys}
    for path in samples:
        flid = sample_flid(path)
        w.case(styp, "sample_" + Path(path).stem.split("_")[0],
               f"sample {path} over a flight holding old {'/'.join(keys)} values",
               ["US-05 AC2", "FS §5.2", "D7"], [prior(flid, with_old=keys)], [{"sample": path}])
    if not samples:
        w.case(styp, "present", f"{styp} present: Set/Replace over old values{note}", ["US-05 AC2", "FS §5.2"],
               [prior(with_old=keys)], [flop(styp, FLID, payload(styp, present))])
    w.case(styp, "empty", f"empty {styp} element(s): Clear (D7){note}", ["US-05 AC2", "D7", "FS §6.2"],
           [prior(with_old=keys)], [flop(styp, FLID, payload(styp, dict.fromkeys(keys)))])
    w.case(styp, "absent", f"{styp} block without its payload element: no-op, nothing created or bumped",
           ["US-05 AC2", "INV-14b"], [prior(with_old=keys)], [flop(styp, FLID, "")])
    spec = group_spec(styp)
    if spec is not None and spec.seq_attr:
        zero = f'\t\t<{styp} {spec.seq_attr}="0"/>\n'
        w.case(styp, "zero_sequence", f"all {spec.seq_attr}=0: Clear", ["US-05 AC2", "D7", "FS §5.2"],
               [prior(with_old=keys)], [flop(styp, FLID, zero + zero)])
        w.case(styp, "zero_mixed", f"{spec.seq_attr}=0 mixed with an entry: DEAD(malformed), nothing written",
               ["US-05 AC2", "D7", "FS §5.2"], [prior(with_old=keys)],
               [flop(styp, FLID, element(styp, present[styp][:1]) + zero)])  # type: ignore[index]
    message = flop(styp, FLID, payload(styp, present))
    w.case(styp, "duplicate", "the same message twice: applied once, the second SKIPPED(duplicate)",
           ["US-05 AC2", "US-03 AC3", "INV-9"], [prior(with_old=keys)], [message, {"again": 0}])
    w.case(styp, "unknown_flight", f"unknown FLID: the flight is created with fday NULL (FS §5.4){note}",
           ["US-05 AC2", "FS §5.4"], [], [flop(styp, "NEW1", payload(styp, present))])


def cross_cutting(w: Writer) -> None:
    gates = {"GTDT": new_value("GTDT")}
    w.case("GTDT", "deleted_flight",
           "FLOP on a soft-deleted flight: no visible effect (no version, no event; only ADFT or a snapshot "
           "restores, INV-29); its hidden fields take the message (last writer wins, F6), so a later restore shows "
           "the newest values",
           ["US-05 AC3", "D2"], [prior(with_old=("GTDT",), DELETED=True)],
           [flop("GTDT", FLID, payload("GTDT", gates))])
    same = flop("STND", FLID, "\t\t<STND>S209</STND>\n")
    w.case("STND", "same_value", "a new message repeating the stored value: no version bump, no event",
           ["US-05 AC5"], [prior(STND="S209")], [same, flop("STND", FLID, "\t\t<STND>S209</STND>\n")])
    w.case("GTDT", "codeshare_child", "FLOP on a code-share child updates the child and its master (C4); "
           "the master's msg tells it, the child publishes only its schd state",
           ["US-05 AC4", "INV-21"],
           [prior("100", MAFL=[{"FLID": FLID, "ALCD": "MU", "FLNO": "MU501"}]), child(FLID, "100", "MU", "MU501")],
           [flop("GTDT", FLID, payload("GTDT", gates))])
    w.case("STND", "foreign_element", "a catalogue element outside the subtype: DEAD(malformed), named",
           ["G-FLOP-UNMAPPED"], [prior()], [flop("STND", FLID, "\t\t<STND>S1</STND>\n\t\t<RENO>B1</RENO>\n")])
    w.case("STND", "unknown_element", "an element the catalogue does not know: DEAD(malformed), named",
           ["G-FLOP-UNMAPPED"], [prior()], [flop("STND", FLID, "\t\t<STND>S1</STND>\n\t\t<XTRA>1</XTRA>\n")])
    two = envelope("FLOP", "STND", f"\t<FLOP>\n\t\t<FLID>{FLID}</FLID>\n\t\t<STND>S1</STND>\n\t</FLOP>\n"
                                   f"\t<FLOP>\n\t\t<FLID>16</FLID>\n\t\t<STND>S2</STND>\n\t</FLOP>\n")
    w.case("STND", "two_blocks", "two FLOP blocks: two flights changed in one transaction",
           ["US-05 AC2", "FS §4.3"], [prior(), prior("16")], [two])
    w.case("FDIV", "stale_attributes", "FDIV/01 then FDIV/04 (DDIR empty): whole-object replace, no stale DDIR",
           ["FS §6.2", "D7"], [prior()], [{"sample": "FDIV/01_FDIV.xml"}, {"sample": "FDIV/04_FDIV.xml"}])


def dnld(*records: str) -> str:
    return envelope("SCHD", "DNLD", f"\t<SCHD>\n\t\t<RECS>{len(records)}</RECS>\n{''.join(records)}\t</SCHD>\n")


def codeshare_cases(w: Writer) -> None:
    """D30, INV-21/22, C-25, US-05 AC4: MAFL derived from the children's MAID; cascades."""
    spec = ["D30", "INV-21", "INV-22", "C-25", "US-05 AC4"]
    family = family_priors()
    w.case("CODESHARE", "child_maid_changed", "FLOP MAID moves child 15 from master 100 to 200: 100's MAFL loses "
           "it, 200's gains it; both masters get a new version and events", spec,
           [*family, prior("200", ALCD="HU", FLNO="HU7")], [flop("MAID", "15", "\t\t<MAID>200</MAID>\n")])
    w.case("CODESHARE", "child_flno_changed", "FLOP FLNO on child 16: the master's MAFL entry follows it, "
           "and the master's msg announces it, not the child's (C4)", spec,
           family, [flop("FLNO", "16", "\t\t<FLNO>FM902</FLNO>\n")])
    w.case("CODESHARE", "child_update_other", "FLOP GTDT on a child: its master takes the gates and is "
           "notified (C4); the MAFL is unchanged", spec, family,
           [flop("GTDT", "15", '\t\t<GTDT GTNO="1"><GATE>A1</GATE></GTDT>\n')])
    w.case("CODESHARE", "master_created_after_children", "children arrive first (their master unknown); the "
           "ADFT that creates the master gives it the MAFL of the children already waiting", spec,
           family[1:], [adft(fltr("100"))])
    w.case("CODESHARE", "adft_of_master", "ADFT of a master not carrying MAFL keeps the derived MAFL; one "
           "carrying another MAFL does not replace it (derived, docs/decisions.md C1)", spec + ["D21"], family,
           [adft(fltr("100", "<STND>S7</STND>")),
            adft(fltr("100", '<STND>S8</STND><MAFL><FLID>999</FLID><ALCD>ZZ</ALCD><FLNO>ZZ1</FLNO></MAFL>'))])
    w.case("CODESHARE", "flop_mafl_ignored", "FLOP MAFL on a master: checked, not stored (MAFL is derived): "
           "no version, no event", spec, family,
           [flop("MAFL", "100", "\t\t<MAFL><FLID>999</FLID><ALCD>ZZ</ALCD><FLNO>ZZ1</FLNO></MAFL>\n")])
    w.case("CODESHARE", "snapshot_of_master", "a DNLD listing master 100 without MAFL (its children are not in "
           "the package): the master's MAFL stays derived from them, not cleared (D1 does not reach it)",
           spec + ["D1"], family, [dnld(fltr("100", "<STND>S7</STND>"))])
    w.case("CODESHARE", "snapshot_creates_child", "a DNLD listing a child of master 200, which the package does "
           "not list: the master outside the package is refreshed (new version, msg and schd events)", spec,
           [prior("200", ALCD="HU", FLNO="HU7")],
           [dnld(fltr("300", "<MAID>200</MAID>").replace("<FLNO>CA101</FLNO>", "<FLNO>CA300</FLNO>"))])
    w.case("CODESHARE", "master_deleted_by_snapshot", "a DNLD lists master 100; the next DNLD of the day omits "
           "it: 100 is diff-deleted and its live children 15 and 16 (owned by no day) with it, one tombstone "
           "each, in the same transaction", spec + ["D2"], family[1:],
           [dnld(fltr("100"), fltr("300")), dnld(fltr("300"))])
    w.case("CODESHARE", "child_deleted_by_snapshot", "a DNLD lists master 100 and child 15; the next one omits "
           "the child: 15 is diff-deleted and the master's MAFL loses it", spec + ["D2"], family[2:],
           [dnld(fltr("100"), fltr("15", "<MAID>100</MAID>")), dnld(fltr("100"))])


def sequence_cases(w: Writer) -> None:
    """D25, US-03 AC2: bad sequence attributes and oversized groups are DEAD(malformed), nothing written."""
    spec = ["US-03 AC2", "D25", "FS §6"]
    old = [prior(with_old=("GTDT",))]

    def gates(*seqs: str) -> str:
        return "".join(f'\t\t<GTDT GTNO="{n}"><GATE>G{i}</GATE></GTDT>\n' for i, n in enumerate(seqs))

    w.case("GTDT", "sequence_not_integer", 'GTNO="abc": DEAD(malformed), the old gates stay', spec, old,
           [flop("GTDT", FLID, gates("1", "abc"))])
    w.case("GTDT", "sequence_out_of_range", 'GTNO="1000": DEAD(malformed)', spec, old,
           [flop("GTDT", FLID, gates("1000"))])
    w.case("GTDT", "sequence_repeated", "GTNO 2 twice in one message: DEAD(malformed)", spec, old,
           [flop("GTDT", FLID, gates("1", "2", "2"))])
    w.case("GTDT", "over_cap", "65 gates (the cap is 64): DEAD(malformed)", spec, old,
           [flop("GTDT", FLID, gates(*(str(n) for n in range(1, 66))))])
    w.case("GTDT", "at_cap", "64 gates: accepted, in input order", spec, old,
           [flop("GTDT", FLID, gates(*(str(n) for n in range(1, 65))))])
    points = "".join(f'\t\t<ROUT RTNO="{n}"><APCD>A{n:02d}</APCD></ROUT>\n' for n in range(1, 18))
    w.case("ROUT", "over_cap", "17 route points (the cap is 16): DEAD(malformed)", spec, [prior(with_old=("ROUT",))],
           [flop("ROUT", FLID, points)])
    w.case("PSHT", "sequence_repeated", "PSHN 1 twice in one text group: DEAD(malformed)", spec,
           [prior(with_old=("PSHT",))],
           [flop("PSHT", FLID, '\t\t<PSHT PSHN="1"><PSTM>A</PSTM></PSHT>\n\t\t<PSHT PSHN="1"><PSTM>B</PSTM></PSHT>\n')])
    w.case("ADFT", "sequence_repeated", "ADFT record with CKNO 1 twice: DEAD(malformed), nothing created", spec, [],
           [adft(fltr("900", '<CKDT CKNO="1"><CHKC>01</CHKC></CKDT><CKDT CKNO="1"><CHKC>02</CHKC></CKDT>'))])


FAMILY_MAFL = [{"FLID": "15", "ALCD": "MU", "FLNO": "MU501"}, {"FLID": "16", "ALCD": "FM", "FLNO": "FM901"}]


def child(flid: str, master: str, alcd: str, flno: str, **extra) -> dict:
    """A code-share child of ``master`` as its master's MAFL lists it (D30)."""
    return prior(flid, MAID=master, ALCD=alcd, FLNO=flno, **extra)


def family_priors(**master_extra) -> list[dict]:
    """Master 100 (CA101) with children 15 (MU501) and 16 (FM901): MAFL as derived from them."""
    return [prior("100", MAFL=FAMILY_MAFL, **master_extra), child("15", "100", "MU", "MU501"),
            child("16", "100", "FM", "FM901")]


def fdel_cases(w: Writer) -> None:
    spec = ["US-05 AC4", "INV-21", "INV-22", "C-25", "D2", "D30"]
    mafl = FAMILY_MAFL
    family = family_priors()
    w.case("FDEL", "sample_01", "FDEL/01: soft delete, tombstone on schd", spec,
           [prior(with_old=("GTDT",), FDAY="2003-12-12")], [{"sample": "FDEL/01_FDEL.xml"}])
    w.case("FDEL", "missing_target",
           "no such flight: SUCCEEDED without visible effect; a silent tombstone row (deleted, version 0, "
           "no event) keeps a late, older creating message from bringing the flight back (F6)", spec, [],
           [{"sample": "FDEL/01_FDEL.xml"}])
    w.case("FDEL", "already_deleted", "deleting a deleted flight: no effect", spec,
           [prior(DELETED=True)], [{"sample": "FDEL/01_FDEL.xml"}])
    w.case("FDEL", "codeshare_child", "deleting a child: master's MAFL loses it and the master is notified",
           spec, family, [{"sample": "FDEL/01_FDEL.xml"}])
    w.case("FDEL", "codeshare_last_child", "deleting the only listed child clears the master's MAFL", spec,
           [prior("100", MAFL=mafl[:1]), child("15", "100", "MU", "MU501")], [{"sample": "FDEL/01_FDEL.xml"}])
    w.case("FDEL", "codeshare_master", "deleting a master deletes it and all its children in one transaction",
           spec, family, [flop("FDEL", "100", "\t\t<FDEL></FDEL>\n")])
    w.case("FDEL", "codeshare_master_and_child", "child and master in one message: all deleted, master not updated",
           spec, family,
           [envelope("FLOP", "FDEL", "\t<FLOP>\n\t\t<FLID>15</FLID>\n\t\t<FDEL/>\n\t</FLOP>\n"
                                     "\t<FLOP>\n\t\t<FLID>100</FLID>\n\t\t<FDEL/>\n\t</FLOP>\n")])
    w.case("FDEL", "marker_not_empty", "FDEL marker with content: DEAD(malformed), nothing deleted",
           ["US-05 AC2", "G-FLOP-UNMAPPED"], [prior()], [flop("FDEL", FLID, "\t\t<FDEL>X</FDEL>\n")])
    w.case("FDEL", "marker_missing", "FDEL block without the marker: DEAD(malformed), nothing deleted",
           ["US-05 AC2"], [prior()], [flop("FDEL", FLID, "")])
    msg = flop("FDEL", FLID, "\t\t<FDEL></FDEL>\n")
    w.case("FDEL", "duplicate", "the same FDEL twice: one delete, the second SKIPPED(duplicate)",
           ["US-05 AC2", "INV-9"], [prior()], [msg, {"again": 0}])


def fltr(flid: str, extra: str = "", *, mandatory: bool = True) -> str:
    body = f"<FLID>{flid}</FLID>"
    if mandatory:
        body += ("<ALCD>CA</ALCD><FLNO>CA101</FLNO><MVIN>A</MVIN><SODT>12DEC031345</SODT>"
                 "<FLTY>W</FLTY><FLIN>D</FLIN><ACFT>333</ACFT>")
    return f"\t\t<FLTR>{body}{extra}</FLTR>\n"


def adft(*records: str, recs: int | None = None) -> str:
    n = len(records) if recs is None else recs
    return envelope("SCHD", "ADFT", f"\t<SCHD>\n\t\t<RECS>{n}</RECS>\n{''.join(records)}\t</SCHD>\n")


def adft_cases(w: Writer) -> None:
    spec = ["US-05 AC2", "FS §4.2"]
    gates = '<GTDT GTNO="1"><GATE>A1</GATE></GTDT><GTDT GTNO="2"><GATE>A2</GATE></GTDT>'
    w.case("ADFT", "new_flight", "ADFT for an unknown FLID creates it, fday NULL (D21)", spec + ["D21"], [],
           [adft(fltr("900", "<STND>S1</STND>" + gates))])
    rich = prior("900", with_old=("GTDT", "FDIV", "SRVT"), FDAY="2021-01-23", FFID="CA-CA101-A-12DEC031345-D",
                 STND="S9", ESTT="12DEC031400")
    increment = spec + ["D21", "INV-14b"]
    w.case("ADFT", "merge", "ADFT merges (D21): carried STND set, carried GTDT replaced whole; FDIV, SRVT, ESTT, "
           "FFID and fday it does not carry are kept", increment, [rich],
           [adft(fltr("900", "<STND>S1</STND>" + gates))])
    busy = prior("900", FDAY="2021-01-23", STND="101", ESTT="12DEC031400", ACFT="333", FLTY="W", FLIN="D",
                 GTDT=[{"GTNO": "1", "GATE": "A1"}])
    w.case("ADFT", "keeps_uncarried", "ADFT carrying only the identity and a new aircraft type: stand, gate and "
           "ESTT are kept, only ACFT changes (INV-14b, US-05 AC2)", increment, [busy],
           [adft(fltr("900").replace("<ACFT>333</ACFT>", "<ACFT>738</ACFT>"))])
    w.case("ADFT", "carried_empty_clears", "ADFT carrying STND and FDIV empty and GTDT with GTNO=0: those are "
           "cleared (D7), the uncarried ESTT and SRVT are kept", increment + ["D7"], [rich],
           [adft(fltr("900", '<STND></STND><FDIV></FDIV><GTDT GTNO="0"/>'))])
    w.case("ADFT", "restore_deleted", "ADFT for a soft-deleted flight restores it (INV-29), merged over what it "
           "held: STND set, ESTT kept", increment + ["INV-29"],
           [prior("900", DELETED=True, STND="S9", ACFT="333", FLTY="W", FLIN="D", ESTT="12DEC031400")],
           [adft(fltr("900", "<STND>S1</STND>"))])
    same = prior("900", ACFT="333", FLTY="W", FLIN="D", STND="S1")
    w.case("ADFT", "same_content", "ADFT equal to the stored state: no version bump, no event (US-05 AC5)",
           spec + ["US-05 AC5"], [same], [adft(fltr("900", "<STND>S1</STND>"))])
    w.case("ADFT", "from_dnld_sample", "the two FLTRs of SCHD/01_DNLD.xml sent as ADFT: upsert only, fday NULL",
           spec, [prior("15", STND="OLD")], [{"sample": "SCHD/01_DNLD.xml", "styp": "ADFT"}])
    w.case("ADFT", "missing_mandatory", "ADFT record without ALCD etc.: DEAD(malformed)", spec, [prior("900")],
           [adft(fltr("900", "<STND>S1</STND>", mandatory=False))])
    w.case("ADFT", "recs_mismatch", "RECS disagrees with the FLTR count: DEAD(malformed)", spec + ["D5"], [],
           [adft(fltr("900"), recs=2)])
    w.case("ADFT", "zero_mixed", "GTNO=0 mixed with an entry inside ADFT: DEAD(malformed)", spec + ["D7"], [],
           [adft(fltr("900", '<GTDT GTNO="1"><GATE>A1</GATE></GTDT><GTDT GTNO="0"/>'))])
    w.case("ADFT", "codeshare_child", "ADFT creating a code-share child: the child stores MAID, its master's "
           "MAFL gains it (derived, D30) and the master gets a new version and its events",
           spec + ["INV-21", "D30", "US-05 AC4"], [prior("100")],
           [adft(fltr("900", "<MAID>100</MAID><CSOP>CA</CSOP><CSFT>CA101</CSFT>"))])


STAND_TIMES = "\t\t\t<STST>15DEC021330</STST>\n\t\t\t<STET>15DEC021430</STET>\n"


def stands(*codes: str) -> str:
    """FLOP/PSDT allocating ``codes`` as planned stands 1, 2, ... over the same hour."""
    return flop("PSDT", FLID, "".join(f'\t\t<PSDT PSNO="{n}">\n\t\t\t<PSST>{code}</PSST>\n{STAND_TIMES}\t\t</PSDT>\n'
                                      for n, code in enumerate(codes, start=1)))


def stand(code: str | None) -> str:
    """FLOP/STND setting the actual stand (``None``: the empty element, a clear)."""
    return flop("STND", FLID, element("STND", code))


def abdg_cases(w: Writer) -> None:
    """US-14, US-05 AC6, D27: the airbridges serving each allocated stand, derived from the ABDG
    reference data (the public DNLD package first, unless the case is about its absence)."""
    spec = ["US-14 AC2", "US-05 AC6", "D27"]
    package = {"sample": "ABDG/01_DNLD.xml"}
    w.case("ABDG", "near_stand", "PSDT on a stand an airbridge serves: ABDG lists it; STND gets STND_ABDG", spec,
           [prior()], [package, stands("212"), stand("112")])
    w.case("ABDG", "remote_stand", "PSDT on a stand no airbridge serves: ABDG [] (not null)", spec, [prior()],
           [package, stands("R211", "111")])
    bridges = ("\t<RECS>2</RECS>\n\t<ABDG>\n\t\t<ABCD>112</ABCD>\n\t\t<STND>112</STND>\n\t\t<STND>111</STND>\n"
               "\t</ABDG>\n\t<ABDG>\n\t\t<ABCD>113</ABCD>\n\t\t<STND>111</STND>\n\t</ABDG>\n")
    w.case("ABDG", "two_airbridges", "one stand served by two airbridges: both, sorted", spec, [prior()],
           [envelope("ABDG", "DNLD", bridges), stands("111"), stand("111")])
    w.case("ABDG", "mapping_missing", "no ABDG data ever loaded: ABDG null (unknown, never []), SUCCEEDED",
           spec + ["US-14 AC3"], [prior()], [stands("212", "R1"), stand("212")])
    w.case("ABDG", "mapping_after_allocation", "ABDG loaded after the stands were allocated: the flight is "
           "re-derived by the ABDG message (version +1, msg/schd events naming ABDG)", spec,
           [prior(PSDT=[{"PSNO": "1", "PSST": "212"}], STND="111")], [package])
    w.case("ABDG", "mapping_updated", "ADD/UPD/DEL samples after the allocation: each re-derives the flight; "
           "ADD 213 serves 213 and 613, UPD moves 613 to 256, DEL removes 213", spec, [prior()],
           [package, stands("213", "613", "256"),
            {"sample": "ABDG/03_ADD.xml"}, {"sample": "ABDG/04_UPD.xml"}, {"sample": "ABDG/05_DEL.xml"}])
    w.case("ABDG", "unaffected_flight", "an ABDG change that touches none of the flight's stands: no bump, "
           "no event", spec + ["US-05 AC5"], [prior()], [package, stands("212"), {"sample": "ABDG/03_ADD.xml"}])
    w.case("ABDG", "stand_cleared", "PSDT and STND cleared: the entries and STND_ABDG go with them", spec,
           [prior()], [package, stands("212"), stand("212"), flop("PSDT", FLID, element("PSDT", None)),
                       stand(None)])
    w.case("ABDG", "set_by_message", "a PSDT entry carrying ABDG: DEAD(malformed), derived values are not "
           "message fields", spec + ["G-FLOP-UNMAPPED"], [prior()],
           [package, flop("PSDT", FLID, '\t\t<PSDT PSNO="1"><PSST>212</PSST><ABDG>999</ABDG></PSDT>\n')])
    w.case("ABDG", "codeshare_child", "PSDT on a code-share child: the child carries ABDG; the master takes the "
           "stands with their ABDG and is notified (C4)", spec + ["INV-21"],
           [prior("100", MAFL=FAMILY_MAFL[:1]), prior("15", MAID="100")], [package, stands("212")])


def clear_generated(root: Path) -> None:
    """Remove the inputs this script writes (not ``hand_*``, not the expected faces) so a case
    dropped from the script disappears; the run writes the rest again, byte for byte."""
    for folder in root.iterdir():
        if folder.is_dir():
            for f in folder.glob("*"):
                if f.name.endswith((".case.json", ".xml")) and not f.name.startswith(HAND_PREFIX):
                    f.unlink()


def drop_emptied(root: Path) -> None:
    """A folder left with no case at all (its subtype gone) goes, with the stale faces in it; a
    folder holding anything else is not this script's and stays."""
    for folder in root.iterdir():
        if folder.is_dir() and all(f.is_file() and f.name.endswith(".expected.json") for f in folder.iterdir()):
            shutil.rmtree(folder)


def write_all(root: Path) -> int:
    """Write every generated case input under ``root``; returns the number of cases."""
    w = Writer(root)
    samples = flop_samples()
    for styp in SUBTYPE_ELEMENTS:
        subtype_cases(w, styp, samples.get(styp, []))
    cross_cutting(w)
    fdel_cases(w)
    adft_cases(w)
    sequence_cases(w)
    codeshare_cases(w)
    abdg_cases(w)
    return w.count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=HERE,
                        help="folder to write the cases into: empty, or a copy of tests/golden, since the "
                             "generated inputs found there are removed first (default: tests/golden)")
    root = parser.parse_args(argv).out.resolve()
    root.mkdir(parents=True, exist_ok=True)
    clear_generated(root)
    count = write_all(root)
    drop_emptied(root)
    print(f"wrote {count} cases under {root}")


if __name__ == "__main__":
    main()
