"""tests/golden/make_cases.py writes exactly the committed generated golden inputs; no server.

A new subtype starts by running the generator (docs/first-change.md). If its output drifted from
what is committed, that run would rewrite or delete other subtypes' cases and the engineer would
have to sort the real change out of the noise. The generator is run into a temporary folder, never
into the repository.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SCRIPT = GOLDEN / "make_cases.py"
HAND_PREFIX = "hand_"
STALE_CASE = "stale_case"


def _inputs(root: Path) -> dict[str, bytes]:
    """The generated case inputs under ``root`` (``hand_*`` and expected faces are not the script's)."""
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.glob("*/*"))
            if f.name.endswith((".case.json", ".xml")) and not f.name.startswith(HAND_PREFIX)}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One generator run into a folder seeded with what it must keep and what it must drop."""
    out = tmp_path_factory.mktemp("golden")
    (out / "STND").mkdir()
    (out / "STND" / "hand_mine.case.json").write_text("{}\n")                 # hand-written: kept
    (out / "STND" / f"{STALE_CASE}.case.json").write_text("{}\n")             # dropped from the script
    (out / "STND" / f"{STALE_CASE}.1.xml").write_text("<MSG/>\n")
    (out / "GONE").mkdir()                                                       # a subtype that went away
    (out / "GONE" / "present.expected.json").write_text("{}\n")
    (out / "notes").mkdir()                                                      # not the script's
    (out / "notes" / "todo.txt").write_text("keep\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return out


def test_generator_reproduces_the_committed_cases(generated: Path) -> None:
    """US-05 AC2: a run of make_cases.py gives the committed generated inputs byte for byte: none
    missing (the ABDG cases included), none extra, none different (every SEQN is the fixed 1)."""
    committed, made = _inputs(GOLDEN), _inputs(generated)
    assert sorted(committed.keys() - made.keys()) == [], "committed but not generated"
    assert sorted(made.keys() - committed.keys()) == [], "generated but not committed"
    differ = sorted(name for name in committed if committed[name] != made[name])
    assert differ == [], f"generated differently from the committed file: {differ[:10]}"
    assert any(name.startswith("ABDG/") for name in made)


def test_generator_keeps_what_is_not_its_own(generated: Path) -> None:
    """US-05 AC2: the run keeps hand-written cases and foreign files, drops the inputs of a case it no
    longer writes and a folder left with nothing but stale faces."""
    assert (generated / "STND" / "hand_mine.case.json").read_text() == "{}\n"
    assert (generated / "notes" / "todo.txt").read_text() == "keep\n"
    assert not list((generated / "STND").glob(f"{STALE_CASE}.*"))
    assert not (generated / "GONE").exists()
