"""What a metered host tool's call gives back: its failure as the host says it, or a block."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...host import ToolResult

#: decides whether a host tool's result is a failure (not charged)
FailedFn = Callable[[Any], bool]


class ToolFailed(Exception):
    """The host's tool raised: re-raised to the host after the flow recorded no charge."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(type(error).__name__)
        self.error = error


@dataclass(frozen=True)
class HostToolError:
    """A host adapter's own mark that its tool failed (not charged): ``result`` is what the
    host answers the model with (Hermes: the error JSON its registry made of the exception)."""

    result: Any


def default_failed(result: Any) -> bool:
    """The host's error channel only: an error ``ToolResult`` or a :class:`HostToolError`.
    Never the content: a tool's text or object with an ``"error"`` key may be its user's own
    output (``run_code`` printing ``{"error": "none"}``), and it is charged like any other."""
    if isinstance(result, ToolResult):
        return result.isError
    return isinstance(result, HostToolError)


def delivered(result: Any) -> Any:
    """What the host hands the model: a :class:`HostToolError`'s own answer, else as is."""
    return result.result if isinstance(result, HostToolError) else result


def block(code: str, message: str, hint: str, **details: Any) -> ToolResult:
    """What the model gets instead of a blocked tool's result: never a bare error."""
    error = {"code": code, "message": message, "hint": hint, **details}
    return ToolResult(structuredContent={"error": error}, isError=True)
