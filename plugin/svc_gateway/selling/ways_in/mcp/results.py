"""Handler answers as MCP results, argument checks, and calling sync or async handlers."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
from collections.abc import Callable
from typing import Any


async def call_any(fn: Callable[..., Any], *args: Any) -> Any:
    """Await an async function; run a sync one in a worker thread (never block the loop)."""
    if inspect.iscoroutinefunction(fn):
        result = await fn(*args)
    else:
        result = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(result):
        result = await result
    return result


def tool_result(value: Any) -> dict[str, Any]:
    """A tool handler's answer as a CallToolResult: text, structured JSON, or content."""
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}]}
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        return {k: v for k, v in value.items() if k != "_meta"}
    if isinstance(value, list):
        return {"content": value}
    text = json.dumps(value, ensure_ascii=False)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if isinstance(value, dict):
        result["structuredContent"] = value
    return result


def resource_result(uri: str, mime_type: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and isinstance(value.get("contents"), list):
        return {"contents": value["contents"]}
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return {"contents": [{"uri": uri, "mimeType": mime_type, "text": text}]}


def prompt_result(value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return {k: v for k, v in value.items() if k in ("messages", "description")}
    if isinstance(value, list):
        return {"messages": value}
    return {"messages": [{"role": "user", "content": {"type": "text", "text": str(value)}}]}


def error_result(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "isError": True}


def schema_problem(schema: Any, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the tool's input schema (``None``: they do)."""
    if not isinstance(schema, dict):
        return None
    jsonschema: Any = importlib.import_module("jsonschema")  # an mcp dependency
    try:
        jsonschema.validate(instance=arguments, schema=schema)
    except jsonschema.ValidationError as exc:
        return str(exc.message)[:300]
    except jsonschema.SchemaError:
        return None
    return None
