"""A second `scripts/demo.sh` start does not reinstall: `scripts/_env.sh`'s
`ensure_venv` runs pip only when the stamp it writes after a successful install does not match
the package files (pyproject.toml) and the extra asked for.
Driven through bash on a copy of the scripts and package files, with a stand-in interpreter
that records its calls, so no real install happens."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ("scripts/_env.sh", "pyproject.toml")
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../calls"
exit 0
"""


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, root / name)
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(FAKE_PYTHON)
    (venv / "python").chmod(0o755)
    (venv / "msgx").write_text("")
    (venv / "msgx").chmod(0o755)
    return root


def ensure(root: Path, extra: str) -> str:
    proc = subprocess.run(["bash", "-c", f'source "{root}/scripts/_env.sh" && ensure_venv "{extra}"'],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def installs(root: Path) -> list[str]:
    calls = root / ".venv" / "calls"
    return [c for c in calls.read_text().splitlines() if "pip install" in c] if calls.exists() else []


def test_a_second_start_skips_the_install_until_a_package_file_changes(tmp_path):
    """First start installs; the second only says msgx is installed; the test extra (scripts/test.sh)
    is installed once on top and then skipped too, and covers the demo's plain install; each change
    of pyproject.toml installs again."""
    root = checkout(tmp_path)
    assert "installing msgx into" in ensure(root, "")
    assert "already installed" in ensure(root, "")
    assert len(installs(root)) == 1
    assert "installing msgx[test]" in ensure(root, "test")
    assert "already installed" in ensure(root, "test") and "already installed" in ensure(root, "")
    assert len(installs(root)) == 2 and installs(root)[-1].endswith("[test]")

    with open(root / "pyproject.toml", "a") as f:
        f.write("\n# a new dependency\n")
    assert "installing msgx[test]" in ensure(root, "test")
    with open(root / "pyproject.toml", "a") as f:
        f.write("\n# another dependency\n")
    assert "installing msgx into" in ensure(root, "")
    assert len(installs(root)) == 4


def test_a_fresh_clone_or_a_lost_stamp_installs(tmp_path):
    """No stamp (a fresh clone, or a virtualenv made by hand): pip runs, for the plain install as
    for the test extra."""
    root = checkout(tmp_path)
    ensure(root, "test")
    (root / ".venv" / ".msgx-install-stamp").unlink()
    assert "installing msgx[test]" in ensure(root, "test")
    assert len(installs(root)) == 2
