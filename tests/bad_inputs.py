"""The bad-input corpus (tests/data/bad-inputs): its index and the exact bytes of each case.

``INDEX.tsv`` has one row per file: what the file is, the expected mailbox outcome
(``STATUS:reason``; ``UNSTORABLE:`` when MariaDB refuses to store the bytes at all, so no such row
can ever reach msgx), a text the recorded error detail must contain, and the expected answer of
``POST /cminmsgs/send`` (``status:err_code``; ``200:`` when accepted).

Files are the body's bytes, except ``*.recipe.json``: big bodies are generated at test time from a
list of ``[text, times]`` parts (``{n}`` in a repeated text becomes 1, 2, ...), so no megabytes
are committed.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "data" / "bad-inputs"


@dataclass(frozen=True)
class Expected:
    status: str
    code: str        # the mailbox reason or the HTTP err_code; empty when none

    @classmethod
    def parse(cls, text: str) -> Expected:
        status, _, code = text.partition(":")
        return cls(status, code)


@dataclass(frozen=True)
class Case:
    file: str
    what: str
    mailbox: Expected
    mailbox_detail: str
    http: Expected

    @property
    def storable(self) -> bool:
        return self.mailbox.status != "UNSTORABLE"

    def body(self) -> bytes:
        path = CORPUS / self.file
        if not self.file.endswith(".recipe.json"):
            return path.read_bytes()
        parts = json.loads(path.read_text(encoding="utf-8"))["parts"]
        out = []
        for text, times in parts:
            if "{n}" in text:
                out.extend(text.replace("{n}", str(n)) for n in range(1, times + 1))
            else:
                out.append(text * times)
        return "".join(out).encode("utf-8")


def cases() -> list[Case]:
    with open(CORPUS / "INDEX.tsv", encoding="utf-8", newline="") as fh:
        return [Case(r["file"], r["what"], Expected.parse(r["mailbox"]), r["mailbox_detail"],
                     Expected.parse(r["http"])) for r in csv.DictReader(fh, delimiter="\t")]
