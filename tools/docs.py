"""The documentation site's generated parts, as an MkDocs hook (``hooks:`` in mkdocs.yml).

A page asks for a generated part with a marker on a line of its own,
``<!-- generated: NAME -->``, and the build replaces it with markdown made from the
source of truth, so the page changes when that source does and never by hand:

* ``settings``: every variable ``Settings`` reads (``shared/config/``: its declaration's
  name, older names, default, meaning and minimum);
* ``documents``: each document's JSON Schema in ``schemas/`` (``make schemas`` writes them);
* ``sse-events``: the events a reply streams, from their JSON Schema
  (``schemas/events.schema.json``, which ``tools/eventschema.py`` makes from
  ``shared/agent/stream/events.py`` and the names ``shared/agent/stream/sse.py`` sends);
* ``benchmarks``: the figures ``make bench`` last recorded in ``bench/results.json``;
* ``eval-settings``: the variables a run of ``make eval`` reads (``evals/settings.py``);
* ``eval-results``: the latest kept result of each model ``make eval`` ran
  (``evals/results/``), set by set, with the cases that failed.

A marker with no generator is an error, so a misspelt one fails the build.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # mkdocs loads hooks by path: the repository's packages
    sys.path.insert(0, str(ROOT))

from bench.results import RESULTS  # noqa: E402
from evals.run import RESULTS as EVAL_RESULTS  # noqa: E402
from evals.settings import DECLARED as EVAL_SETTINGS  # noqa: E402
from shared.config import SETTINGS  # noqa: E402
from shared.config.declaration import Setting  # noqa: E402
from tools.eventschema import EVENTS_PATH  # noqa: E402

SCHEMAS = ROOT / "schemas"
_MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


def shown(declared: Setting, default: object) -> str:
    """A setting's default as the docs state it."""
    if declared.shown is not None:
        return declared.shown
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return str(default).lower()
    return str(default)


_DESIGN = re.compile(r" ?\(DESIGN §[^)]*\)")


def _cell(text: str) -> str:
    """Text for one cell of a markdown table (reST's double backticks made single, and
    the code's pointers to the design notes, which live outside this repository, left
    out)."""
    text = _DESIGN.sub("", text)
    return text.replace("``", "`").replace("|", "\\|").replace("\n", " ")


def settings_table(declarations: dict[str, tuple[Setting, Any]] = SETTINGS) -> str:
    """One row per variable ``Settings`` reads (or another set of ``declarations``), in
    declaration order."""
    rows = [
        "| variable | default | minimum | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for declared, default in declarations.values():
        name, *older = declared.names
        names = f"`{name}`" + "".join(f" (or `{o}`)" for o in older)
        minimum = "" if declared.minimum is None else str(declared.minimum)
        value = shown(declared, default)
        value = value if value == "unset" else f"`{value}`"
        rows.append(f"| {names} | {value} | {minimum} | {_cell(declared.meaning)} |")
    return "\n".join(rows)


def _type(schema: dict[str, Any]) -> str:
    """A property's type in a few words: ``string``, ``array of Message``, ``a | b``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " \\| ".join(_type(s) for s in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        values = schema["additionalProperties"]
        if isinstance(values, dict) and values:
            return f"map of {_type(values)}"
    return " \\| ".join(kind) if isinstance(kind, list) else str(kind)


def _object(title: str, schema: dict[str, Any], level: str) -> list[str]:
    lines = [f"{level} {title}", ""]
    if schema.get("description"):
        lines += [_cell(schema["description"]), ""]
    properties: dict[str, Any] = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", []))
        # A table none of whose fields is described has no column for it.
        described = any(prop.get("description") for prop in properties.values())
        head = ["field", "type", "required", *(["meaning"] if described else [])]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for name, prop in properties.items():
            cells = [f"`{name}`", _type(prop), "yes" if name in required else ""]
            if described:
                cells.append(_cell(prop.get("description", "")))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def document_schemas(folder: Path = SCHEMAS) -> str:
    """Each ``*.schema.json`` in ``folder`` but the events' (``sse_events``): the document,
    then each of its definitions."""
    lines: list[str] = []
    for path in sorted(folder.glob("*.schema.json")):
        if path.name == EVENTS_PATH.name:
            continue
        schema = json.loads(path.read_text(encoding="utf-8"))
        title = schema.get("title") or path.name
        lines += _object(f"{title} (`schemas/{path.name}`)", schema, "##")
        for name, definition in schema.get("$defs", {}).items():
            lines += _object(name, definition, "###")
    return "\n".join(lines).rstrip()


def sse_events(path: Path = EVENTS_PATH) -> str:
    """The events a reply streams, in the order of the union, with their wire fields, from
    their JSON Schema (``type`` is the frame's ``event:`` line, not a field of its data)."""
    schema = json.loads(path.read_text(encoding="utf-8"))
    lines: list[str] = []
    for ref in schema["oneOf"]:
        event = schema["$defs"][ref["$ref"].rsplit("/", 1)[-1]]
        properties = dict(event["properties"])
        kind = properties.pop("type")["const"]
        fields = {**event, "properties": properties}
        lines += _object(f"`{kind}`", fields, "###")
    return "\n".join(lines).rstrip()


def benchmarks(path: Path = RESULTS) -> str:
    """The latest figures of each benchmark ``make bench`` ran, with the machine and date."""
    if not path.exists():
        return (
            "!!! note\n    No results are committed yet: `make bench` writes "
            "`bench/results.json`, and this page shows it once it is committed."
        )
    results: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    lines: list[str] = []
    targets = [(name, t) for name, run in sorted(results.items()) for t in run.get("targets", ())]
    if targets:
        lines += [
            "## Targets",
            "",
            "Each target beside its figure in the latest run, and the floor's and the peers' "
            "measured in the same run.",
            "",
            "| figure | ours | target | | beside it, same run | benchmark |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for name, t in targets:
            verdict = "met" if t["met"] else "**not met**"
            cells = (t["figure"], t["ours"], t["target"], verdict, t["beside"], f"`{name}`")
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    for name, run in sorted(results.items()):
        machine = run["machine"]
        lines += [
            f"## `bench/{name}.py`",
            "",
            f"Run on {run['date']} at commit `{run['commit']}`: {machine['cpus']} CPUs "
            f"({machine['processor']}), {machine['system']}, Python {machine['python']}.",
            "",
            "```text",
            run["report"].rstrip(),
            "```",
            "",
        ]
    return "\n".join(lines).rstrip()


def eval_results(folder: Path = EVAL_RESULTS) -> str:
    """The newest result of each model in ``folder``: its passes set by set, its tokens
    and cost, and each failed assertion with its reason."""
    newest: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        newest[result["model"]] = result  # sorted by name: a model's dates ascend
    if not newest:
        return "!!! note\n    No results are kept yet: `make eval` writes them to `evals/results/`."
    lines: list[str] = []
    for model, result in sorted(newest.items()):
        tokens = result["tokens"]
        price = result["cost_usd"]
        judge = f"`{result['judge']}`" if result["judge"] else "none"
        lines += [
            f"### `{model}`, {result['date']}",
            "",
            f"Judge: {judge}; tokens: "
            f"{tokens['input']:,} in, {tokens['output']:,} out; cost: "
            + ("unknown" if price is None else f"${price:.4f}")
            + ".",
            "",
            "| set | cases | passed |",
            "| --- | --- | --- |",
        ]
        sets: dict[str, list[bool]] = {}
        for name, case in result["cases"].items():
            sets.setdefault(name.split("/")[0], []).append(case["passed"])
        for name, passed in sets.items():
            lines.append(f"| {name} | {len(passed)} | {sum(passed)} |")
        failed = [
            f"| `{name}` | {assertion} | {_cell(str(case['reasons'].get(assertion, '')))} |"
            for name, case in result["cases"].items()
            for assertion, ok in case["assertions"].items()
            if not ok
        ]
        if failed:
            lines += ["", "| case | assertion | why |", "| --- | --- | --- |", *failed]
        lines.append("")
    return "\n".join(lines).rstrip()


GENERATORS = {
    "settings": settings_table,
    "eval-settings": lambda: settings_table(EVAL_SETTINGS),
    "eval-results": eval_results,
    "documents": document_schemas,
    "sse-events": sse_events,
    "benchmarks": benchmarks,
}


def fill(markdown: str) -> str:
    """``markdown`` with each marker replaced by its generated part.

    Raises:
        KeyError: a marker names no generator.
    """
    return _MARKER.sub(lambda m: GENERATORS[m[1]](), markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: fill the page's markers before it is rendered."""
    return fill(markdown)
