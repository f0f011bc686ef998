"""Every decision id and every section (§) the repository cites resolves inside it.

docs/decisions.md is an index: one line per decision id, ``- [P13](pipeline.md#p13), write-behind:
...``, linking to the decision's record (an anchored heading in the explanation page of its topic)
or, for the D, R and S families, to the table of the page that holds them. Every family found in
the index is checked, wherever it is cited: code comments and docstrings, the prose of the docs and
the ``doc``/``spec`` fields of the golden cases. Test data is not read (XML, JSON bodies, string
literals), and a name that only looks like an id is told apart by its form: ``A0`` and ``C05`` have a
leading zero, and ``gate A1``, ``stands S9/S10`` or ``flight F2`` follow the word that names them.

A section is cited as ``FS §n`` (docs/requirements.md), ``catalogue §n`` or ``SIS §n``
(docs/requirements.md), or ``DESIGN §n`` / ``architecture.md §n`` (a numbered section of
docs/architecture.md); a list continues a citation (``FS §4.2, §4.3``, ``FS §3.3–§3.6``).
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
TREES = ("msgx_engine", "msgx_dagster", "docs", "tests", "bench", "deploy", "scripts", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".json", ".xml", ".c", ".txt", ".ini", ".cfg"}
HASH_COMMENTED = {".sh", ".yaml", ".yml", ".toml", ".ini", ".cfg"}
ALL_FAMILIES = set("ACDEFGLMOPRST")

INDEX_LINE = re.compile(r"^- \[([A-Z]\d+)\]\(([\w./-]+)#([\w-]+)\), ([^:\n]+): (.+)$", re.M)
RECORD = re.compile(r'^### <a id="([a-z]\d+)"></a>([A-Z]\d+), (.+)$', re.M)
TABLE_ROW = re.compile(r"^\| \**([A-Z]\d+)\** \|", re.M)
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
CODE_SPAN = re.compile(r"``.*?``|`[^`\n]*`", re.S)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
NAMED_BEFORE = re.compile(r"\b(?:gates?|stands?|belts?|flights?|counters?|carousels?|chutes?|rows?)"
                          r"\s+(?:[A-Z]\w*(?:/|,\s*|\s+and\s+|\s+or\s+|\.\.))*$", re.I)

DOCUMENT = r"(FS|DESIGN|[Cc]atalogue|`{0,2}sis-catalogue\.md`{0,2}|SIS(?: interface)?|\[?architecture(?:\.md)?)"
SECTION = r"§\s?\d+(?:\.\d+)*"
SECTION_CITATION = re.compile(rf"{DOCUMENT} ({SECTION}(?:\s*(?:/|,|and|or|–|-)\s*{SECTION})*)")
ANY_SECTION = re.compile(SECTION)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = page.read_text()
    return {_slug(h) for h in HEADING.findall(text)} | set(re.findall(r'<a id="([\w-]+)"></a>', text))


def index() -> dict[str, tuple[str, str, str]]:
    """Decision id -> (page, anchor, short name), from docs/decisions.md."""
    found: dict[str, tuple[str, str, str]] = {}
    for rid, page, anchor, name, _ in INDEX_LINE.findall((DOCS / "decisions.md").read_text()):
        assert rid not in found, f"{rid} has two lines in docs/decisions.md"
        found[rid] = (page, anchor, name)
    return found


def _files() -> list[Path]:
    """Every file of the trees above but this one (its examples are undefined on purpose)."""
    roots = [REPO / name for name in TREES]
    found = (file for root in roots for file in ([root] if root.is_file() else root.rglob("*")))
    return sorted(f for f in found if f.is_file() and "__pycache__" not in f.parts and f != Path(__file__).resolve())


def _python_prose(text: str) -> Iterator[str]:
    """Comments and docstrings, in the order they come: where a module cites; never its string
    literals (test data)."""
    pieces: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            pieces.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                pieces.append((node.body[0].lineno, CODE_SPAN.sub("", doc)))
    for _, piece in sorted(pieces, key=lambda piece: piece[0]):
        yield piece


def prose(path: Path) -> Iterator[str]:
    """The text of ``path`` that may cite a decision."""
    if path.suffix == ".py":
        yield from _python_prose(path.read_text())
    elif path.suffix == ".md":
        yield CODE_SPAN.sub("", FENCE.sub("", path.read_text()))
    elif path.suffix in HASH_COMMENTED:
        yield from (line.split("#", 1)[1] for line in path.read_text().splitlines() if "#" in line)
    elif path.suffix == ".json" and path.name.endswith(".case.json"):
        case = json.loads(path.read_text())
        yield " ".join([case.get("doc", ""), *case.get("spec", [])])


def citations(text: str, families: str) -> Iterator[str]:
    """The decision ids ``text`` cites, without names that only look like one."""
    for match in re.finditer(rf"(?<![\w/.-])[{families}][1-9]\d?\b(?!-\d)", text):
        before = text[max(0, match.start() - 60):match.start()]
        if NAMED_BEFORE.search(before) or before.endswith(("'", '"')):
            continue
        yield match.group(0)


def test_the_index_has_one_line_per_decision_of_every_family() -> None:
    """Every family is in the index, each id once, with a short name."""
    found = index()
    assert {rid[0] for rid in found} == ALL_FAMILIES
    assert {"A1", "C4", "D30", "E1", "F6", "G1", "L7", "M12", "O1", "P13", "R1", "S1", "T11"} <= set(found)
    assert not TABLE_ROW.findall((DOCS / "decisions.md").read_text()), \
        "docs/decisions.md is an index: a decision's row goes to its record (see 'Adding a decision')"


def test_every_index_line_lands_on_its_record() -> None:
    """An index line's link lands on the record's anchor, whose heading carries the same id and
    short name; a D, R or S line, and a superseded one, on the section whose table has the id's row."""
    wrong = []
    for rid, (page, anchor, name) in index().items():
        path = DOCS / page
        if not path.is_file() or anchor not in _anchors(path):
            wrong.append(f"{rid}: {page}#{anchor} does not exist")
            continue
        text = path.read_text()
        if rid[0] in "DRS" or page.startswith("history/"):      # a table's row; a superseded entry
            if rid not in TABLE_ROW.findall(text):
                wrong.append(f"{rid}: no row in {page}")
            continue
        records = {a: (r, n) for a, r, n in RECORD.findall(text)}
        if records.get(anchor) != (rid, name):
            wrong.append(f"{rid}: {page}#{anchor} is not headed '{rid}, {name}'")
    assert not wrong, "\n".join(wrong)


def test_every_record_is_in_the_index() -> None:
    """A record no index line leads to is a decision nobody finds: every anchored record heading of
    the docs is indexed, and none is written twice."""
    indexed = {(page, anchor) for page, anchor, _ in index().values()}
    seen: dict[str, str] = {}
    orphans = []
    for page in sorted(DOCS.rglob("*.md")):
        for anchor, rid, _ in RECORD.findall(page.read_text()):
            rel = str(page.relative_to(DOCS))
            assert rid not in seen, f"{rid} has a record in {seen[rid]} and in {rel}"
            seen[rid] = rel
            if (rel, anchor) not in indexed:
                orphans.append(f"{rid} ({rel})")
    assert not orphans, "records without an index line in docs/decisions.md: " + ", ".join(orphans)


def test_decision_ids_resolve_in_the_index() -> None:
    """Every decision id cited in code comments, docstrings, docs and golden cases, of every family,
    has its line in docs/decisions.md."""
    found = index()
    families = "".join(sorted({rid[0] for rid in found}))
    missing: dict[str, str] = {}
    for file in _files():
        for text in prose(file):
            for cited in citations(text, families):
                if cited not in found:
                    missing.setdefault(cited, str(file.relative_to(REPO)))
    listed = ", ".join(f"{cited} (first in {where})" for cited, where in sorted(missing.items()))
    assert not missing, "not in docs/decisions.md: " + listed


def test_operations_cites_no_decision() -> None:
    """docs/operations.md is for operators: the why is one link away, never an id in the text."""
    text = (DOCS / "operations.md").read_text()
    assert not list(citations(text, "".join(sorted(ALL_FAMILIES))))


def test_every_link_between_the_docs_lands() -> None:
    """A link from one page of docs/ to another (a decision's record, a section) lands on a page
    that exists and, when it names one, on an anchor of it: a record moved is a link to follow."""
    broken = []
    for page in sorted(DOCS.rglob("*.md")):
        for link in re.findall(r"\]\(([^)\s]+)\)", CODE_SPAN.sub("", FENCE.sub("", page.read_text()))):
            path, _, anchor = link.partition("#")
            if re.match(r"[a-z]+:", path) or not (path.endswith(".md") or not path):
                continue
            target = (page.parent / path).resolve() if path else page
            if not target.is_file() or (anchor and anchor not in _anchors(target)):
                broken.append(f"{page.relative_to(DOCS)}: {link}")
    assert not broken, "\n".join(broken)


def _sections() -> dict[str, set[str]]:
    requirements = (DOCS / "requirements.md").read_text()
    listed = re.findall(r"^\| (FS|catalogue|SIS) §(\d+(?:\.\d+)*) \|", requirements, re.M)
    design = set(re.findall(r"^## (\d+)\. ", (DOCS / "architecture.md").read_text(), re.M))
    return {
        "FS": {s for d, s in listed if d == "FS"},
        "catalogue": {s for d, s in listed if d == "catalogue"},
        "SIS": {s for d, s in listed if d == "SIS"},
        "DESIGN": design,
    }


def _document(name: str) -> str:
    name = name.strip("`[")
    if name in ("FS", "DESIGN"):
        return name
    if name.lower() in ("catalogue", "sis-catalogue.md"):
        return "catalogue"
    return "SIS" if name.startswith("SIS") else "DESIGN"


def section_citations(text: str) -> Iterator[tuple[str, str]]:
    """(document, section) for every section cited in ``text``."""
    for match in SECTION_CITATION.finditer(text):
        for section in re.findall(r"§\s?(\d+(?:\.\d+)*)", match.group(2)):
            yield _document(match.group(1)), section.rstrip(".")


def test_every_section_resolves() -> None:
    """Every "FS §n", "catalogue §n", "SIS §n" is listed in docs/requirements.md and every "DESIGN §n"
    or "architecture.md §n" is a numbered section of docs/architecture.md; a § with no document
    before it (outside a list that continues one) is only allowed where architecture.md and
    requirements.md name architecture's own sections."""
    sections = _sections()
    assert {"1", "5.2", "9"} <= sections["FS"] and {"1", "2", "3", "8"} <= sections["DESIGN"]
    missing: dict[str, str] = {}
    for file in _files():
        if file.suffix not in TEXT_SUFFIXES:
            continue
        text = file.read_text(errors="replace")
        where = str(file.relative_to(REPO))
        covered = 0
        for document, section in section_citations(text):
            covered += 1
            if section not in sections[document]:
                missing.setdefault(f"{document} §{section}", where)
        bare = len(ANY_SECTION.findall(text)) - covered
        if bare and where not in ("docs/architecture.md", "docs/requirements.md"):
            missing.setdefault(f"{bare} section(s) naming no document", where)
    assert not missing, f"sections that resolve nowhere: {missing}"


def test_the_patterns_tell_ids_from_names() -> None:
    """The scans would notice: an undefined id is reported, a name that looks like one is not."""
    assert list(citations("P10 and D99 (F6, C4); not ADFT, P-256, A0, C05 or L7-3", "ACDFLP")) == \
        ["P10", "D99", "F6", "C4"]
    assert list(citations('gate A1, gates G28/G33, stands S9/S10, flight F2, "A1", G0x..G30', "AFGS")) == []
    assert list(section_citations("(FS §3.3–§3.6, DESIGN §2.1, catalogue §6 and SIS §3.16.2)")) == \
        [("FS", "3.3"), ("FS", "3.6"), ("DESIGN", "2.1"), ("catalogue", "6"), ("SIS", "3.16.2")]
    assert "2.1" not in _sections()["DESIGN"]
    assert "D99" not in index()


def _flat(text: str) -> str:
    """Prose with its line breaks and comment markers gone: a name may wrap onto the next line."""
    return re.sub(r"\s+", " ", re.sub(r"\s*\n\s*#?\s*", " ", text)).lower()


def unnamed_first_citations(text: str, names: dict[str, str]) -> list[str]:
    """The ids whose first citation in a module's comments and docstrings carries no short name
    (near it, before or after: ``P13, write-behind``, ``write-behind (P13)``, a list such as
    ``P10-P16: P10, group commit; …``). A citation inside a code span is code, not a citation."""
    seen: set[str] = set()
    missing = []
    prose_text = "\n".join(_python_prose(text))      # a name may wrap onto the next comment line
    for match in re.finditer(r"(?<![\w/.-])([A-Z][1-9]\d?)\b(?!-\d)", prose_text):
        rid = match.group(1)
        before = prose_text[max(0, match.start() - 60):match.start()]
        if rid not in names or rid in seen or NAMED_BEFORE.search(before) or before.endswith(("'", '"')):
            continue
        seen.add(rid)
        name = names[rid].lower()
        reach = len(name) + 40
        following = _flat(prose_text[match.end():match.end() + reach + 400])[:reach]
        preceding = _flat(prose_text[max(0, match.start() - reach - 400):match.start()])[-reach:]
        if name not in following and name not in preceding:
            missing.append(rid)
    return missing


def test_a_modules_first_citation_of_a_decision_carries_its_short_name() -> None:
    """In package code the first time a module cites a decision it says its short name too (as
    docs/decisions.md names it), so a reader knows what is meant without leaving the file."""
    names = {rid: name for rid, (_, _, name) in index().items()}
    missing = {}
    for root in ("msgx_engine", "msgx_dagster"):
        for path in sorted((REPO / root).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            unnamed = unnamed_first_citations(path.read_text(), names)
            if unnamed:
                missing[str(path.relative_to(REPO))] = unnamed
    assert not missing, f"first citations without the decision's short name: {missing}"


def test_a_first_citation_without_its_name_is_found() -> None:
    names = {"P13": "write-behind", "D22": "projection failure"}
    assert unnamed_first_citations(
        '"""Writes later (P13).\n\nThe group sends them at its commit, in three round trips: P13, write-behind."""\n',
        names) == ["P13"]
    assert unnamed_first_citations('"""Writes later (P13, write-behind); D22,\nprojection failure."""\n', names) == []
    assert unnamed_first_citations("x = 1  # waits (D22, projection\n      # failure)\n", names) == []
