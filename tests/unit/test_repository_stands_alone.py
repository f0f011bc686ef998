"""The repository stands alone (DESIGN §4, last point): a clone holds everything its tests, benchmarks,
demo and documents need. No tracked file may point outside the clone: not at the design folder that
sat beside the development checkout, and not at an absolute home of a development machine.

Needs only git: the test clones the repository into a temporary folder and reads what the clone
tracks, so an untracked file in a developer's checkout can neither hide nor cause a finding.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Assembled from parts so that this file does not match itself.
_UP = ".."
_HOMES = ("work", "root", "home", "Users")
FORBIDDEN = re.compile("|".join([
    re.escape(_UP + "/shared"),            # the design folder beside the development checkout
    "[\"']shared[\"']" + r"\s*/",            # ... and the same reached by joining paths in code
    r"(?<![\w.~-])/(?:" + "|".join(_HOMES) + ")/",   # absolute homes of development machines
]))


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    target = tmp_path_factory.mktemp("clone") / "msgx"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(target)], check=True,
                   capture_output=True, text=True)
    return target


def offending_lines(root: Path, paths: list[str]) -> list[str]:
    """``path:line: text`` for every tracked text line that points outside the repository."""
    found = []
    for rel in paths:
        data = (root / rel).read_bytes()
        if b"\0" in data[:8192]:
            continue                                   # binary: not a document or a program
        for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{rel}:{n}: {line.strip()[:120]}")
    return found


def test_no_tracked_file_points_outside_the_clone(clone: Path) -> None:
    """DESIGN §4 "the repository stands alone": no tracked file of a fresh clone mentions the sibling
    design folder or an absolute path of a development machine (tests, bench, scripts, docs, data)."""
    tracked = _git("ls-files", "-z", cwd=clone).split("\0")
    tracked = [p for p in tracked if p]
    assert len(tracked) > 100 and "README.md" in tracked
    assert offending_lines(clone, tracked) == []


def test_the_pattern_catches_what_it_is_meant_to(tmp_path: Path) -> None:
    """The scan itself: each forbidden form is found, ordinary paths are not."""
    homes = [f"/{home}/dev/msgx" for home in _HOMES]
    bad = [_UP + "/shared/DESIGN.md", 'REPO.parent / "shar' + 'ed" / "sis-samples"', "see" + " " + homes[0],
           *homes[1:]]
    good = ["tests/data/sis-samples/GTDT/01_GTDT.xml", "~/.msgx", "$MSGX_HOME/dagster",
            "/tmp/msgx-demo", "docs/architecture.md", "src/work/x"]
    (tmp_path / "a.txt").write_text("\n".join(bad + good), "utf-8")
    found = offending_lines(tmp_path, ["a.txt"])
    assert [f.split(": ", 1)[1] for f in found] == bad
