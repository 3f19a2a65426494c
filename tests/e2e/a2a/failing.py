"""An agent handler that fails (the A2A buyer's tests: a task that does not complete)."""

from __future__ import annotations

from typing import Any


def boom(_request: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("the agent broke")
