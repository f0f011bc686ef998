"""Every id the repository cites resolves inside it: requirement ids and flight-state design
sections in docs/requirements.md; decision ids are checked by test_decision_ids.py.

The requirements are kept outside the repository; a citation a reader cannot look up is a dead
end, so a new citation needs its line on the requirements page first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREES = ("msgx_engine", "msgx_dagster", "docs", "tests", "bench", "deploy", "scripts", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".json", ".xml", ".c", ".txt", ".ini", ".cfg"}

REQUIREMENT = re.compile(r"\b(?:(?:C|CLM|INV|OPS|PRE|US)-\d+[a-z]?|Q\d{1,2})\b")
FS_CITATION = re.compile(r"\bFS (§\d+(?:\.\d+)*(?:\s*(?:/|,|and|or)\s*§\d+(?:\.\d+)*)*)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
TABLE_ID = re.compile(r"^\| \**([A-Z]{1,3}-?\d+[a-z]?|FS §\d+(?:\.\d+)*)\** \|", re.M)


def _files() -> Iterator[Path]:
    for name in TREES:
        path = REPO / name
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            if file.is_file() and file.suffix in TEXT_SUFFIXES and "__pycache__" not in file.parts \
                    and file != Path(__file__).resolve():      # its examples are undefined on purpose
                yield file


def _defined(*pages: str) -> set[str]:
    return {m.group(1) for page in pages for m in TABLE_ID.finditer((REPO / page).read_text())}


def _unresolved(find: re.Pattern[str], defined: set[str]) -> list[str]:
    missing: dict[str, str] = {}
    for file in _files():
        for match in find.finditer(file.read_text(errors="replace")):
            if match.group(0) not in defined:
                missing.setdefault(match.group(0), str(file.relative_to(REPO)))
    return [f"{cited} (first in {where})" for cited, where in sorted(missing.items())]


def test_requirement_ids_resolve_in_the_requirements_page() -> None:
    """Every C-, PRE-, INV-, CLM-, OPS-, US- and Q id cited anywhere has a line in
    docs/requirements.md (US-05 AC2 is covered by US-05's line)."""
    missing = _unresolved(REQUIREMENT, _defined("docs/requirements.md"))
    assert not missing, "not defined in docs/requirements.md: " + ", ".join(missing)


def test_flight_state_sections_resolve_in_the_requirements_page() -> None:
    """Every "FS §n" (and "FS §3.3/§4.2") names a section listed in docs/requirements.md."""
    listed = {s.removeprefix("FS §") for s in _defined("docs/requirements.md") if s.startswith("FS §")}
    assert {"1", "5.2", "9"} <= listed
    missing: dict[str, str] = {}
    for file in _files():
        for citation in FS_CITATION.finditer(file.read_text(errors="replace")):
            for section in SECTION.findall(citation.group(1)):
                if section.rstrip(".") not in listed:
                    missing.setdefault(section, str(file.relative_to(REPO)))
    assert not missing, f"FS sections not listed in docs/requirements.md: {missing}"


def test_the_patterns_catch_an_undefined_id() -> None:
    """The scan would notice: an id outside the defined sets is reported."""
    assert REQUIREMENT.findall("see INV-99 and US-05 AC2") == ["INV-99", "US-05"]
    assert "INV-99" not in _defined("docs/requirements.md")
    citation = FS_CITATION.search("(FS §3.3/§4.2)")
    assert citation is not None and SECTION.findall(citation.group(1)) == ["3.3", "4.2"]
