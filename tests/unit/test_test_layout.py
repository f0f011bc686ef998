"""The suite collects on a fresh clone: pytest runs without a rootdir package for ``tests/``'s
sub-folders, so two test modules with one basename in different folders stop the whole run at
collection ("import file mismatch"). This guard names the clash before CI does."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_unique_basename() -> None:
    folders: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        folders[path.name].append(str(path.parent.relative_to(TESTS)))
    assert {name: where for name, where in folders.items() if len(where) > 1} == {}
