"""The comparison as a report: a JSON document (``msgx compare --json``, stable keys) and the same
content as markdown for a person (counts per class and per field, examples with both values, the
known-difference rules with their hits, and the rules that never hit)."""

from __future__ import annotations

from typing import Any

import orjson

from msgx_engine.compare.diff import EXPLAINED, Comparison, Difference
from msgx_engine.compare.rules import DIFFERS, MISSING_HERE, MISSING_THERE

EXAMPLES = 5            # example FLIDs per field and class
DETAILS = 20            # unexplained differences shown with both values
VALUE_CHARS = 120       # a value longer than this is clipped in the markdown

_CLASS_TEXT = {MISSING_HERE: "missing here", MISSING_THERE: "missing there", DIFFERS: "field differs",
               EXPLAINED: "explained by a rule"}


def as_json(result: Comparison, *, here: str, there: str) -> dict[str, Any]:
    """The report's content; every key is always present."""
    fields: dict[str, dict[str, Any]] = {}
    for d in result.differences:
        entry = fields.setdefault(d.field, {"total": 0, "unexplained": 0, "classes": {}, "examples": []})
        entry["total"] += 1
        entry["unexplained"] += d.rule is None
        entry["classes"][d.cls] = entry["classes"].get(d.cls, 0) + 1
        if len(entry["examples"]) < EXAMPLES and d.flid not in entry["examples"]:
            entry["examples"].append(d.flid)
    classes = result.by_class()
    examples: dict[str, list[str]] = {c: [] for c in classes}
    for d in result.differences:
        if len(examples[d.cls]) < EXAMPLES and d.flid not in examples[d.cls]:
            examples[d.cls].append(d.flid)
    unexplained = [d for d in result.differences if d.rule is None]
    return {
        "verdict": "pass" if not unexplained else "fail",
        "here": here,
        "there": there,
        "scope": result.scope.describe(),
        "not_compared": sorted(result.ignored),
        "flights": {"here": result.here_total, "there": result.there_total, "compared": result.compared,
                    "equal": result.equal,
                    "with_unexplained": len({d.flid for d in unexplained})},
        "differences": {"total": len(result.differences), "unexplained": len(unexplained), "by_class": classes,
                        "examples": examples},
        "fields": dict(sorted(fields.items(), key=lambda kv: (-kv[1]["total"], kv[0]))),
        "rules": [{**r.describe(), "hits": result.rule_hits.get(r.number, 0)} for r in result.rules],
        "unused_rules": [r.describe() for r in result.unused_rules],
        "unexplained_examples": [_detail(d) for d in unexplained[:DETAILS]],
    }


def _detail(d: Difference) -> dict[str, Any]:
    here, there = d.here, d.there
    if d.kind != DIFFERS:     # a whole missing flight: name it, do not repeat its document
        here = None if here is None else "(flight present)"
        there = None if there is None else "(flight present)"
    return {"flid": d.flid, "field": d.field, "class": d.cls, "here": here, "there": there}


def dumps(doc: dict[str, Any]) -> str:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()


def as_markdown(doc: dict[str, Any]) -> str:
    """The JSON report as a person reads it."""
    f, d = doc["flights"], doc["differences"]
    verdict = ("PASS: no unexplained difference" if doc["verdict"] == "pass"
               else f"FAIL: {d['unexplained']} unexplained difference(s) in {f['with_unexplained']} flight(s)")
    lines = [
        "# Flight state comparison", "",
        f"- here: {doc['here']}",
        f"- there (reference): {doc['there']}",
        f"- scope: {doc['scope']}",
        f"- not compared: {', '.join(doc['not_compared']) or 'nothing'} (msgx's own bookkeeping)",
        f"- flights: {f['here']} here, {f['there']} there, {f['compared']} compared, {f['equal']} equal",
        "", f"**{verdict}**", "",
        "## Differences by class", "", "| class | count | example FLIDs |", "|---|---:|---|",
    ]
    for cls, count in d["by_class"].items():
        lines.append(f"| {_CLASS_TEXT[cls]} | {count} | {', '.join(d['examples'][cls])} |")
    if doc["fields"]:
        lines += ["", "## Differences by field", "", "| field | total | unexplained | classes | example FLIDs |",
                  "|---|---:|---:|---|---|"]
        for name, entry in doc["fields"].items():
            classes = ", ".join(f"{_CLASS_TEXT[c]} {n}" for c, n in entry["classes"].items())
            label = "(whole flight)" if name == "*" else f"`{name}`"
            lines.append(f"| {label} | {entry['total']} | {entry['unexplained']} | {classes} | "
                         f"{', '.join(entry['examples'])} |")
    if doc["unexplained_examples"]:
        lines += ["", "## Unexplained differences (first "
                  f"{len(doc['unexplained_examples'])} of {d['unexplained']})", "",
                  "| FLID | field | class | here | there |", "|---|---|---|---|---|"]
        for item in doc["unexplained_examples"]:
            lines.append(f"| {item['flid']} | {item['field']} | {_CLASS_TEXT[item['class']]} | "
                         f"{_value(item['here'])} | {_value(item['there'])} |")
    lines += ["", "## Known differences", ""]
    if doc["rules"]:
        lines += ["| rule | field | hits | reason |", "|---:|---|---:|---|"]
        lines += [f"| {r['rule']} | `{r['field']}` | {r['hits']} | {r['reason']} |" for r in doc["rules"]]
    else:
        lines.append("No known-differences file given (--known FILE): every difference counts as unexplained.")
    if doc["unused_rules"]:
        lines += ["", "Rules that explained nothing (still needed?): "
                  + ", ".join(f"{r['rule']} (`{r['field']}`)" for r in doc["unused_rules"])]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if value is None:
        return "(absent)"
    text = value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    if len(text) > VALUE_CHARS:
        text = text[:VALUE_CHARS] + "…"
    return text.replace("|", "\\|").replace("\n", " ")
