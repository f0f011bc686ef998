"""The ``msgx`` command's package against its reference (docs/reference/cli.md): each command group's
module registers exactly the commands the reference says it holds, every group module is named
there, ``msgx --help`` lists the groups' commands in the reference's order, and every command the
reference's list shows exists in the real parser (sub-commands included)."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

from msgx_engine.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
REFERENCE = (REPO / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
PACKAGE = REPO / "msgx_engine" / "cli"
NOT_GROUPS = {"__init__", "__main__", "main", "common"}   # the package's own plumbing, no commands


def documented_groups() -> dict[str, list[str]]:
    """``- `msgx_engine/cli/NAME.py`: `msgx a`, `msgx b``` lines: module name -> its commands, in order."""
    groups = {}
    for m in re.finditer(r"^- `msgx_engine/cli/(\w+)\.py`: (.+)$", REFERENCE, flags=re.M):
        groups[m.group(1)] = re.findall(r"`msgx ([\w-]+)`", m.group(2))
    assert groups, "docs/reference/cli.md names no command group module"
    return groups


def subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def test_each_group_module_registers_the_commands_the_reference_gives_it():
    for name, commands in documented_groups().items():
        sub = argparse.ArgumentParser(prog="msgx").add_subparsers(dest="command")
        importlib.import_module(f"msgx_engine.cli.{name}").register(sub)
        assert list(sub.choices) == commands, name


def test_the_reference_names_every_group_module():
    modules = {path.stem for path in PACKAGE.glob("*.py")} - NOT_GROUPS
    assert modules == set(documented_groups())


def test_msgx_help_lists_the_groups_commands_in_the_references_order():
    assert list(subcommands(cli.parser())) == [c for commands in documented_groups().values() for c in commands]


def test_every_command_in_the_references_list_exists():
    """``msgx COMMAND [SUB|SUB2] …`` lines of the list: the command, and its sub-command where it has them."""
    top = subcommands(cli.parser())
    lines = [line.split()[1:] for block in re.findall(r"```\n(.*?)```", REFERENCE, flags=re.S)
             for line in block.splitlines() if line.startswith("msgx ")]
    assert len(lines) > 20
    for words in lines:
        assert words[0] in top, words
        nested = subcommands(top[words[0]])
        if nested:
            assert all(w in nested for w in words[1].split("|")), words
