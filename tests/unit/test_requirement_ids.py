"""Every requirement id the repository cites resolves inside it, in docs/requirements.md.

The requirements are kept outside the repository; a citation a reader cannot look up is a dead
end, so a new citation needs its line on the requirements page first. Decision ids and sections
(FS §n, DESIGN §n, ...) are checked by test_decision_ids.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREES = ("msgx_engine", "msgx_dagster", "docs", "tests", "bench", "deploy", "scripts", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".json", ".xml", ".c", ".txt", ".ini", ".cfg"}

REQUIREMENT = re.compile(r"\b(?:(?:C|CLM|INV|OPS|PRE|US)-\d+[a-z]?|Q\d{1,2})\b")
TABLE_ID = re.compile(r"^\| \**([A-Z]{1,3}-\d+[a-z]?|Q\d+)\** \|", re.M)


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


def test_the_patterns_catch_an_undefined_id() -> None:
    """The scan would notice: an id outside the defined sets is reported."""
    assert REQUIREMENT.findall("see INV-99 and US-05 AC2") == ["INV-99", "US-05"]
    assert "INV-99" not in _defined("docs/requirements.md")
