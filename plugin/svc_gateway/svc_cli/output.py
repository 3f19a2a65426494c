"""What ``svc`` prints: the service's JSON (``--format json``) or a readable table.

JSON mode writes exactly one JSON document to stdout and nothing else; notes go to stderr in
both modes. Tables flatten nested objects into dotted keys (``metadata.main.name``), so the
default output never shows raw JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

FORMATS = ("table", "json")
Column = tuple[str, str]
"""A table column: its header and the dotted path of the value in each row."""


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def flatten(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """``{"a": {"b": [1, 2]}}`` → ``[("a.b", "1, 2")]``; lists of objects are indexed."""
    if isinstance(data, dict):
        if not data and prefix:
            return [(prefix, "")]
        rows: list[tuple[str, str]] = []
        for key, value in data.items():
            rows.extend(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    if isinstance(data, list):
        if all(not isinstance(item, dict | list) for item in data):
            return [(prefix or "value", ", ".join(scalar(item) for item in data))]
        rows = []
        for index, item in enumerate(data):
            rows.extend(flatten(item, f"{prefix}.{index}" if prefix else str(index)))
        return rows
    return [(prefix or "value", scalar(data))]


def pick(row: Any, path: str) -> str:
    """The value at a dotted path, as table text (lists joined, objects flattened)."""
    value = row
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, dict | list):
        return "; ".join(f"{k}={v}" if k != "value" else v for k, v in flatten(value))
    return scalar(value)


def grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def key_value_table(data: Any) -> str:
    pairs = flatten(data)
    if not pairs:
        return "(empty)"
    width = max(len(key) for key, _ in pairs)
    return "\n".join(f"{key.ljust(width)}  {value}".rstrip() for key, value in pairs)


def list_table(items: Sequence[Any], columns: Sequence[Column]) -> str:
    if not items:
        return "(none)"
    rows = [[pick(item, path) for _, path in columns] for item in items]
    return grid([header for header, _ in columns], rows)


class Output:
    """The run's printer: one format, stdout for results only."""

    def __init__(self, fmt: str) -> None:
        self.format = fmt

    @property
    def json(self) -> bool:
        return self.format == "json"

    def result(
        self,
        data: Any,
        *,
        items: str | None = None,
        columns: Sequence[Column] = (),
        text: str | None = None,
    ) -> None:
        """Print a result: JSON as is, else ``text``, else a table of ``data[items]`` with
        ``columns`` (plus the other top-level fields), else a key/value table."""
        if self.json:
            click.echo(to_json(data))
            return
        if text is not None:
            click.echo(text)
            return
        if items is not None and isinstance(data, dict | list):
            listed = data if isinstance(data, list) else data.get(items)
            rest = {k: v for k, v in data.items() if k != items} if isinstance(data, dict) else {}
            click.echo(list_table(listed if isinstance(listed, list) else [], columns))
            if rest:
                click.echo("")
                click.echo(key_value_table(rest))
            return
        click.echo(key_value_table(data))

    @staticmethod
    def note(text: str) -> None:
        """Progress and notes: stderr, in every format."""
        click.echo(text, err=True)
