"""Every FLOP subtype has its golden five-face cases (tests/golden/); no server."""

from __future__ import annotations

from pathlib import Path

CASES = sorted((Path(__file__).resolve().parents[1] / "golden").glob("*/*.case.json"))


def test_every_subtype_has_golden_cases() -> None:
    """US-05 AC1/AC2: every catalogue FLOP subtype, FDEL and ADFT has golden cases."""
    from msgx_engine.handlers.flop import SUPPORTED_SUBTYPES
    from msgx_engine.sis.catalogue import FLOP_SUBTYPES

    covered = {p.parent.name for p in CASES}
    assert FLOP_SUBTYPES <= SUPPORTED_SUBTYPES
    assert SUPPORTED_SUBTYPES | {"ADFT"} <= covered
