"""What ``svc`` prints: the service's JSON (``--format json``) or a readable table.

JSON mode writes exactly one JSON document to stdout and nothing else; notes go to stderr in
both modes. Tables show nested objects as an indented outline (a key above its object's
fields, ``-`` items for a list of objects) and cells on one line (``POST https://...``), so
the default output never shows raw JSON nor dotted column names.

Everything printed passes the plugin logs' redaction (:func:`..redact.redact`): a service
message that quotes a key (a 401 echoing the ``Authorization`` header) is masked. The one
exception is what a result names ``verbatim``: the credential a command was asked for (the
access token of ``get-x402-access-token``, a new member's key) or a key it already masked.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from ..redact import redact

FORMATS = ("table", "json")
Column = tuple[str, str]
"""A table column: its header and the dotted path of the value in each row."""


def echo(text: str, *, err: bool = False) -> None:
    """Print one message (stderr with ``err``), secrets masked."""
    click.echo(redact(text), err=err)


class MaskedStderr:
    """stderr for click's own messages (a usage error quotes the value given): masked."""

    def write(self, text: str) -> int:
        return sys.stderr.write(redact(text))

    def flush(self) -> None:
        sys.stderr.flush()


def _placeholder(index: int) -> str:
    """Text the redaction leaves alone (short, letters and ``@`` only) and no answer has."""
    return f"ISSUED@{chr(65 + index % 26) * (1 + index // 26)}@"


def hold(data: Any, keep: frozenset[str], held: list[str], path: str = "") -> Any:
    """``data`` with the text values at the dotted paths in ``keep`` set aside in ``held``
    (a placeholder stands in), so the rendered output can be masked whole."""
    if isinstance(data, dict):
        out: dict[Any, Any] = {}
        for key, value in data.items():
            at = f"{path}.{key}" if path else str(key)
            if at in keep and isinstance(value, str):
                out[key] = _placeholder(len(held))
                held.append(value)
            else:
                out[key] = hold(value, keep, held, at)
        return out
    if isinstance(data, list):
        return [hold(item, keep, held, path) for item in data]
    return data


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _simple(value: Any) -> bool:
    """A value that fits on its key's line: a scalar, an empty object, or a list of scalars."""
    if isinstance(value, dict):
        return not value
    if isinstance(value, list):
        return all(not isinstance(item, dict | list) for item in value)
    return True


def inline(value: Any) -> str:
    """A value on one line, for a table cell: ``{"POST": url}`` → ``POST url``, an object →
    ``name: Hour, price: 1``, a list → its items joined."""
    if isinstance(value, dict):
        if len(value) == 1 and str(next(iter(value))).isupper():  # {"POST": url}: an endpoint
            ((verb, url),) = value.items()
            return f"{verb} {inline(url)}"
        return ", ".join(f"{key}: {inline(item)}" for key, item in value.items())
    if isinstance(value, list):
        joiner = "; " if any(isinstance(item, dict | list) for item in value) else ", "
        return joiner.join(inline(item) for item in value)
    return scalar(value)


def outline(data: Any, indent: int = 0) -> list[str]:
    """Nested JSON as an indented outline: a key on its own line above its object's fields, a
    list of objects as ``-`` items, the values of one object aligned (never ``a.b.0.c``)."""
    pad = " " * indent
    if isinstance(data, list) and not _simple(data):
        lines: list[str] = []
        for item in data:
            short = isinstance(item, dict) and len(item) == 1 and _simple(next(iter(item.values())))
            block = [inline(item)] if short or not isinstance(item, dict | list) else outline(item)
            block = block or ["(empty)"]
            lines.append(f"{pad}- {block[0]}")
            lines.extend(f"{pad}  {line}" for line in block[1:])
        return lines
    if not isinstance(data, dict):
        return [pad + inline(data)]
    width = max((len(str(k)) for k, v in data.items() if _simple(v)), default=0)
    lines = []
    for key, value in data.items():
        if _simple(value):
            lines.append(f"{pad}{str(key).ljust(width)}  {inline(value)}".rstrip())
        else:
            lines.append(f"{pad}{key}")
            lines.extend(outline(value, indent + 2))
    return lines


def pick(row: Any, path: str) -> str:
    """The value at a dotted path, as table text (objects and lists on one line)."""
    value = row
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return inline(value)


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
    if data in ({}, [], None):
        return "(empty)"
    return "\n".join(outline(data))


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
        verbatim: Sequence[str] = (),
    ) -> None:
        """Print a result: JSON as is, else ``text``, else a table of ``data[items]`` with
        ``columns`` (plus the other top-level fields), else a key/value table. Secrets are
        masked but for the text values at the dotted paths ``verbatim``."""
        held: list[str] = []
        shown = redact(self.render(hold(data, frozenset(verbatim), held), items, columns, text))
        for index, value in enumerate(held):
            value = to_json(value)[1:-1] if self.json else value
            shown = shown.replace(_placeholder(index), value, 1)
        click.echo(shown)

    def render(
        self, data: Any, items: str | None, columns: Sequence[Column], text: str | None
    ) -> str:
        if self.json:
            return to_json(data)
        if text is not None:
            return text
        if items is not None and isinstance(data, dict | list):
            listed = data if isinstance(data, list) else data.get(items)
            rest = {k: v for k, v in data.items() if k != items} if isinstance(data, dict) else {}
            table = list_table(listed if isinstance(listed, list) else [], columns)
            return f"{table}\n\n{key_value_table(rest)}" if rest else table
        return key_value_table(data)

    @staticmethod
    def note(text: str) -> None:
        """Progress and notes: stderr, in every format."""
        echo(text, err=True)
