"""The nine svc_* tools. :func:`load_tools` imports them and returns :data:`TOOLS`.

Importing this package is cheap: the tool modules (and their pydantic models) load on first
use of ``TOOLS``, ``execute``, ``to_spec`` or a tool module; ``register`` reads the stored
catalogue (:mod:`.catalogue`) instead.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .catalogue import TOOL_MODULES, TOOL_NAMES, load_tools

if TYPE_CHECKING:
    from . import builder, query, subscriber
    from .base import TOOLS, Tool, execute, to_spec

_FROM_BASE = ("TOOLS", "Tool", "execute", "to_spec")


def __getattr__(name: str) -> Any:
    if name in TOOL_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _FROM_BASE:
        load_tools()
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "TOOLS",
    "TOOL_NAMES",
    "Tool",
    "builder",
    "execute",
    "load_tools",
    "query",
    "subscriber",
    "to_spec",
]
