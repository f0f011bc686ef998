"""No pointer to a tracker issue or a work-log entry in the repository's code, tests or docs.

"issue 16", "stop 12", "session 27" or "run 12's figures" name things a reader of the repository
cannot open; a comment or a page says what the thing is instead (the latency target, the
snapshot's speed, decision P10). The history pages number their measuring rounds as "run N",
which they define themselves.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREES = ("msgx_engine", "msgx_dagster", "tests", "bench", "scripts", "deploy", "docs", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".c", ".txt", ".ini", ".cfg"}
POINTER = re.compile(
    r"\b[Ii]ssues? #?\d+\b"              # issue 16, issues 3 and 4, issue #12
    r"|#\d{2,}\b(?=[^\n]*\bissue)"      # #43 … issue
    r"|\b[Ss]tops? \d+\b"                # stop 12
    r"|\b[Ss]essions? \d+\b"             # session 27
    r"|\b\d+'s figures\b"                # 12's figures
)


def _offences() -> list[str]:
    found = []
    for name in TREES:
        path = REPO / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix not in TEXT_SUFFIXES or "__pycache__" in file.parts or file == Path(__file__).resolve() \
                    or file.name == "test_operator_text.py":   # its examples of internal ids are on purpose
                continue
            for n, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
                match = POINTER.search(line)
                if match:
                    found.append(f"{file.relative_to(REPO)}:{n}: {match.group(0)!r}")
    return found


def test_no_tracker_or_work_log_pointers() -> None:
    """Code, tests, benchmarks, scripts, deploy files and docs never cite a tracker issue number or a
    work-log entry."""
    offences = _offences()
    assert not offences, f"{len(offences)} pointer(s) a reader cannot open:\n" + "\n".join(offences[:60])


def test_the_pattern_catches_each_kind() -> None:
    """The scan would notice each kind of pointer and leaves ordinary words alone."""
    for text in ("see issue 16", "Issues 3", "issue #7", "stop 12", "session 27", "run 3's figures"):
        assert POINTER.search(text), text
    for text in ("an issue with 16 flights", "the pump stops", "a PostgreSQL session", "D16"):
        assert not POINTER.search(text), text
