"""A stranger's MCP tool listing as the model reads it (svc_queryAgent's ``listTools``): every
string one clean bounded line, input schemas bounded in size and depth."""

from __future__ import annotations

from typing import Any

from ..safe_text import TooBig, clean_json, one_line

#: a listed tool's input schema is shown within this size and depth, else as a plain object
SCHEMA_MAX_BYTES = 8 * 1024
SCHEMA_MAX_DEPTH = 8
PLAIN_SCHEMA: dict[str, Any] = {"type": "object"}
SCHEMA_NOTE = (
    f"The agent's input schema is larger than {SCHEMA_MAX_BYTES // 1024} KiB or nested deeper "
    f"than {SCHEMA_MAX_DEPTH} levels; it is not shown. Pass the arguments its description names."
)


def as_object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def scalar(value: object, limit: int) -> str | None:
    """A price field from a stranger's ``_meta``: one short clean line, or ``None``."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return one_line(str(value)[: limit * 8], limit) or None


def tool_listing(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as the model reads them: every string of a stranger's listing (names,
    descriptions, input schemas, ``_meta`` prices) one clean bounded line."""
    out = []
    for tool in tools[:100]:
        price = as_object(as_object(tool.get("_meta")).get("svc/price"))
        entry: dict[str, Any] = {
            "tool": one_line(tool.get("name", ""), 200),
            "description": one_line(tool.get("description") or "", 500),
        }
        try:
            entry["inputSchema"] = clean_json(
                as_object(tool.get("inputSchema")),
                max_depth=SCHEMA_MAX_DEPTH,
                max_bytes=SCHEMA_MAX_BYTES,
                string_limit=300,
            )
        except TooBig:
            entry["inputSchema"], entry["schemaNote"] = dict(PLAIN_SCHEMA), SCHEMA_NOTE
        entry["credits"] = scalar(price.get("credits"), 40)
        entry["planId"] = scalar(price.get("planId"), 100)
        out.append(entry)
    return out
