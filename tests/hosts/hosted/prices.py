"""Price functions for ``meteredTools`` ("module:function") used by the metering tests."""

from __future__ import annotations

from typing import Any


def by_size(tool_name: str, arguments: dict[str, Any]) -> int:
    """Credits = the ``size`` argument (a bad size gives a bad price)."""
    return arguments.get("size", 1)  # type: ignore[no-any-return]


async def async_two(tool_name: str, arguments: dict[str, Any]) -> int:
    return 2
