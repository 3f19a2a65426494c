"""MkDocs hook: the error-code reference, generated from ``svc_gateway.error_codes.CODES``.

A page holding the line ``<!-- error-codes -->`` gets, in its place, one table per source (the
tools, metered tools, the service client, ``svc``, the service and sandbox, OAuth) with a row per
code: the code (with an anchor of its own name, ``errors.md#insufficient_credits``), what it
means, and what to do. ``tests/test_error_codes.py`` fails when the package raises a code the
registry has no entry for, so the page cannot drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- error-codes -->"
ROOT = Path(__file__).resolve().parents[2]


def _registry() -> tuple[dict[str, Any], dict[str, Any]]:
    plugin = str(ROOT / "plugin")
    if plugin not in sys.path:
        sys.path.insert(0, plugin)
    from svc_gateway.error_codes import CODES, SOURCES

    return dict(CODES), dict(SOURCES)


def _cell(value: str) -> str:
    for raw, safe in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|")):
        value = value.replace(raw, safe)
    return " ".join(value.split())


def error_reference() -> str:
    """The Markdown of the reference: a heading and a table per source, a row per code."""
    codes, sources = _registry()
    lines: list[str] = []
    for source, title in sources.items():
        rows = [(name, code) for name, code in codes.items() if code.source == source]
        if not rows:
            continue
        lines += [f"## {title}", "", "| code | what it means | what to do |", "|---|---|---|"]
        for name, code in rows:
            anchor = f'<a id="{name.replace("<", "").replace(">", "")}"></a>'
            lines.append(f"| {anchor}`{name}` | {_cell(code.meaning)} | {_cell(code.todo)} |")
        lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: put the generated reference where a page asks for it."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, error_reference())
