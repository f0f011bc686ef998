"""The machine-readable SIS catalogue shipped with the package (every TYPE/STYP, element, sequence
attribute and time format of the public AODB samples; see tests/data/sis-samples/README.md).

Read once at import; everything derived here is a plain frozen collection.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources


@cache
def catalogue() -> dict:
    return json.loads(resources.files("msgx_engine.sis").joinpath("catalogue.json").read_text("utf-8"))


REFERENCE_TYPES: frozenset[str] = frozenset(catalogue()["reference"].keys())
FLOP_SUBTYPES: frozenset[str] = frozenset(catalogue()["flight"]["FLOP"].keys())


def flop_entry(styp: str) -> dict | None:
    return catalogue()["flight"]["FLOP"].get(styp)


def reference_entry(rtype: str) -> dict | None:
    return catalogue()["reference"].get(rtype)
