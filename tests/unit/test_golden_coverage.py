"""Every FLOP subtype has its golden five-face cases (tests/golden/), generated and hand-written; no server."""

from __future__ import annotations

import json
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(GOLDEN.glob("*/*.case.json"))
HAND_PREFIX = "hand_"
HAND_FACE_KEYS = {"written_by", "why", "status", "flights", "msg"}


def _expected(case_path: Path) -> Path:
    return case_path.with_name(case_path.name.replace(".case.json", ".expected.json"))


def _subtypes() -> set[str]:
    from msgx_engine.handlers.flop import SUPPORTED_SUBTYPES

    return SUPPORTED_SUBTYPES | {"ADFT"}


def test_every_subtype_has_golden_cases() -> None:
    """US-05 AC1/AC2: every catalogue FLOP subtype, FDEL and ADFT has golden cases."""
    from msgx_engine.handlers.flop import SUPPORTED_SUBTYPES
    from msgx_engine.sis.catalogue import FLOP_SUBTYPES

    covered = {p.parent.name for p in CASES}
    assert FLOP_SUBTYPES <= SUPPORTED_SUBTYPES
    assert SUPPORTED_SUBTYPES | {"ADFT"} <= covered


def test_every_subtype_has_a_hand_written_face() -> None:
    """US-05 AC2: every FLOP subtype, FDEL and ADFT has a case whose expected face was written by
    hand from the spec and the catalogue, so the goldens prove behaviour, not only pin it."""
    hand = {p.parent.name for p in CASES if p.name.startswith(HAND_PREFIX)}
    missing = _subtypes() - hand
    assert not missing, f"no hand-written golden case for {sorted(missing)}"


def test_hand_written_faces_are_intact() -> None:
    """A hand-written face keeps its marker and its restricted shape: a face rewritten by
    ``MSGX_GOLDEN_REGEN`` (the whole state, every event, no marker) or a lost file fails here."""
    hand = [p for p in CASES if p.name.startswith(HAND_PREFIX)]
    assert hand
    for case_path in hand:
        case = json.loads(case_path.read_text(encoding="utf-8"))
        assert case.get("written_by") == "hand", case_path
        assert case["doc"] and case["spec"], f"{case_path}: say which spec/catalogue facts it checks"
        expected_path = _expected(case_path)
        assert expected_path.exists(), f"{case_path}: its hand-written face is missing"
        face = json.loads(expected_path.read_text(encoding="utf-8"))
        assert set(face) == HAND_FACE_KEYS, f"{expected_path}: not a hand-written face (regenerated?)"
        assert face["written_by"] == "hand" and face["why"], expected_path
        for flid, changes in face["flights"].items():
            assert "STATE_VERSION" in changes, f"{expected_path}: flight {flid} names its state version"
        for ref in case["messages"]:
            if "file" in ref:
                assert (case_path.parent / ref["file"]).exists(), f"{case_path}: {ref['file']} missing"


def test_generated_cases_carry_no_hand_marker() -> None:
    """The regeneration run rewrites only generated faces: a case marked hand-written must be named
    ``hand_*`` (the integration test and ``make_cases.py`` skip that prefix), and a generated face
    never carries the marker."""
    for case_path in CASES:
        if case_path.name.startswith(HAND_PREFIX):
            continue
        case = json.loads(case_path.read_text(encoding="utf-8"))
        assert "written_by" not in case, f"{case_path}: a hand-written case must be named {HAND_PREFIX}*"
        expected_path = _expected(case_path)
        if expected_path.exists():
            assert "written_by" not in json.loads(expected_path.read_text(encoding="utf-8")), expected_path


def test_regeneration_skips_hand_written_cases() -> None:
    """``MSGX_GOLDEN_REGEN`` writes faces only for the cases ``test_golden_case`` runs, and the
    case author script leaves ``hand_*`` files alone."""
    from tests.integration import test_flop_golden as golden

    assert golden.HAND_CASES and not any(p.name.startswith(HAND_PREFIX) for p in golden.CASES)
    assert set(golden.CASES) | set(golden.HAND_CASES) == set(CASES)
    script = (GOLDEN / "make_cases.py").read_text(encoding="utf-8")
    assert f'HAND_PREFIX = "{HAND_PREFIX}"' in script and "not f.name.startswith(HAND_PREFIX)" in script
