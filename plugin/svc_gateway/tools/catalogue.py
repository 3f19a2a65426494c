"""The nine tools as a host sees them, read from ``tools.json`` without importing the tools.

``register`` hands each host a name, a description and a JSON Schema per tool; building those
means importing the tool modules, ``buying/`` and their pydantic models (about a fifth of
import + register before), so they are stored in ``tools.json`` (a test checks it equals what
the models generate; ``python -m svc_gateway.tools`` rewrites it). The tool modules are imported
on the first call.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..host import Caller, ToolHandler, ToolResult, ToolSpec

if TYPE_CHECKING:
    from ..account.core import PluginCore
    from ..chat.accounts import UserAccounts
    from .base import Tool

TOOL_NAMES: tuple[str, ...] = (
    "svc_checkBalance",
    "svc_getAccessToken",
    "svc_orderPlan",
    "svc_orderFiatPlan",
    "svc_listPaymentMethods",
    "svc_queryAgent",
    "svc_registerAgent",
    "svc_createPlan",
    "svc_listPlans",
)
#: The modules that declare the tools (each ``@tool`` adds one to ``base.TOOLS``).
TOOL_MODULES: tuple[str, ...] = ("builder", "query", "subscriber")
STORED = Path(__file__).with_name("tools.json")


@dataclass(frozen=True)
class ToolEntry:
    """One tool as the host is told about it."""

    name: str
    description: str
    parameters: dict[str, Any]


@cache
def _stored() -> dict[str, ToolEntry]:
    rows = json.loads(STORED.read_text(encoding="utf-8"))
    return {row["name"]: ToolEntry(**row) for row in rows}


def entry(name: str) -> ToolEntry:
    """The stored entry of one tool; each call gets its own copy of the schema."""
    stored = _stored()[name]
    return ToolEntry(stored.name, stored.description, json.loads(json.dumps(stored.parameters)))


def load_tools() -> dict[str, Tool[Any]]:
    """Import the tool modules (each declares its tools) and return the declared tools."""
    for module in TOOL_MODULES:
        importlib.import_module(f"{__package__}.{module}")
    from .base import TOOLS

    return TOOLS


def generate() -> list[dict[str, Any]]:
    """The entries the tool modules declare (imports them, and pydantic)."""
    tools = load_tools()
    return [
        {"name": n, "description": tools[n].description, "parameters": tools[n].schema()}
        for n in TOOL_NAMES
    ]


def render() -> str:
    return json.dumps(generate(), indent=1, ensure_ascii=False) + "\n"


def lazy_spec(core: PluginCore, name: str, accounts: UserAccounts | None = None) -> ToolSpec:
    """The host-facing spec of one tool, from the stored entry; the tool's module (and its
    parameter model) is imported on the first call, by the thread that calls."""
    handler: ToolHandler | None = None

    async def call(raw: dict[str, Any], /, caller: Caller | None = None) -> ToolResult:
        nonlocal handler
        if handler is None:
            from .base import tool_handler

            handler = tool_handler(core, load_tools()[name], accounts)
        return await handler(raw, caller)

    stored = entry(name)
    return ToolSpec(stored.name, stored.description, stored.parameters, call)
