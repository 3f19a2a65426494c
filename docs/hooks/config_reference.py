"""MkDocs hook: the configuration reference, generated from ``config_schema()`` at build time.

A page holding the line ``<!-- config-reference -->`` gets, in its place, one table row per
plugin setting (key, type, default, meaning) and a table per nested object, read from
:func:`svc_gateway.config.config_schema` (the JSON schema of ``PluginConfig``, camelCase keys,
the same one ``manifest.json`` carries), so the page cannot drift from the code. Each key's row
carries an anchor of the key's name: ``configuration.md#stateUrl``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- config-reference -->"
ROOT = Path(__file__).resolve().parents[2]


def config_schema() -> dict[str, Any]:
    """The schema of this checkout's ``PluginConfig`` (its ``plugin/`` first on the path)."""
    plugin = str(ROOT / "plugin")
    if plugin not in sys.path:
        sys.path.insert(0, plugin)
    from svc_gateway.config import config_schema as schema

    return schema()


def _text(value: str) -> str:
    """Schema text as a table cell: no HTML, no column breaks, no stray emphasis."""
    for raw, safe in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("*", "\\*")):
        value = value.replace(raw, safe)
    return " ".join(value.split())


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _kind(prop: dict[str, Any]) -> str:
    """A property's type in words: ``integer ≥ 1``, ``one of `a`, `b```, ``list of PlanRef``."""
    if "$ref" in prop:
        name = str(prop["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop:
        kinds = [_kind(p) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(kinds)
    if "enum" in prop:
        return "one of " + ", ".join(f"`{value}`" for value in prop["enum"])
    kind = str(prop.get("type", "any"))
    if kind == "string" and prop.get("format") == "password":
        return "secret string"
    if kind == "array":
        return f"list of {_kind(prop.get('items', {}))}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"map of name → {_kind(prop['additionalProperties'])}"
    bounds = [
        f"{sign} {_number(prop[key])}"
        for key, sign in (
            ("minimum", "≥"),
            ("exclusiveMinimum", ">"),
            ("maximum", "≤"),
            ("exclusiveMaximum", "<"),
        )
        if key in prop
    ]
    return kind + (" " + ", ".join(bounds) if bounds else "")


def _default(prop: dict[str, Any]) -> str:
    value = prop.get("default")
    if value is None:
        return ""
    if isinstance(value, float):
        return f"`{_number(value)}`"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{json.dumps(value)}`"


def _table(schema: dict[str, Any], anchors: bool) -> list[str]:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, prop in schema.get("properties", {}).items():
        anchor = f'<a id="{key}"></a>' if anchors else ""
        meaning = _text(str(prop.get("description", "")))
        rows.append(f"| {anchor}`{key}` | {_kind(prop)} | {_default(prop)} | {meaning} |")
    return rows


def config_reference(schema: dict[str, Any] | None = None) -> str:
    """The Markdown of the reference: the settings table, then one table per nested object."""
    schema = config_schema() if schema is None else schema
    lines = _table(schema, anchors=True)
    for name, nested in schema.get("$defs", {}).items():
        lines += ["", f"### {name}", "", _text(str(nested.get("description", ""))), ""]
        lines += _table(nested, anchors=False)
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: put the generated reference where a page asks for it."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, config_reference())
