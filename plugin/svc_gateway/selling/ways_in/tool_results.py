"""What a metered host tool's call gives back: its result when charged, else a failure or block.

An uncharged failure never passes on what the tool produced (an error result's stdout, the
answer a program printed before exiting 1): the model gets :func:`failed_result`, which names
the tool, says nothing was charged, and carries at most the error's own code or type and the
first line of its message (:data:`DETAIL_CHARS` at most)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...host import ToolResult

#: decides whether a host tool's result is a failure (not charged)
FailedFn = Callable[[Any], bool]


class ToolFailed(Exception):
    """The host's tool raised: the call failed, uncharged (the model gets :func:`failed_result`)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(type(error).__name__)
        self.error = error


#: the most of an error's own message a failure passes on (its first line, cut here)
DETAIL_CHARS = 120
#: an error code shown as is: a short identifier, never free text
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,39}")


@dataclass(frozen=True)
class HostToolError:
    """A host adapter's own mark that its tool failed (not charged): ``result`` is what the
    host answered (Hermes: the error JSON its registry made of the exception; AstrBot: the
    items of an ``isError`` result), kept for the host's log, never shown to the model;
    ``detail`` is the error's own type and short message, when the host knows them."""

    result: Any
    detail: str = ""


def default_failed(result: Any) -> bool:
    """The host's error channel only: an error ``ToolResult`` or a :class:`HostToolError`.
    Never the content: a tool's text or object with an ``"error"`` key may be its user's own
    output (``run_code`` printing ``{"error": "none"}``), and it is charged like any other."""
    if isinstance(result, ToolResult):
        return result.isError
    return isinstance(result, HostToolError)


def short(text: str) -> str:
    """The first line of an error's message, cut to :data:`DETAIL_CHARS`."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= DETAIL_CHARS else line[: DETAIL_CHARS - 1] + "…"


def error_detail(result: Any) -> str:
    """What a failure may say of its error: the exception's type and short message, an error
    result's code and short message; never its other fields (``stdout``, ``content``)."""
    if isinstance(result, ToolFailed):
        name, said = type(result.error).__name__, short(str(result.error))
        return f"{name}: {said}" if said else name
    if isinstance(result, HostToolError):
        return short(result.detail)
    error = result.structuredContent.get("error") if isinstance(result, ToolResult) else None
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        parts = [code if isinstance(code, str) and _CODE.fullmatch(code) else ""]
        parts.append(short(message) if isinstance(message, str) else "")
        return ": ".join(part for part in parts if part)
    return short(error) if isinstance(error, str) else ""


def failed_result(name: str, result: Any) -> ToolResult:
    """What the model gets for a tool that failed uncharged: the failure, not the tool's
    output (which would otherwise be an answer given away)."""
    detail = error_detail(result)
    return block(
        "tool_failed",
        f"{name} failed{f' ({detail})' if detail else ''}. Nothing was charged, and its output "
        "is not passed on",
        "Fix the call and try again; if it keeps failing, tell the gateway's operator.",
    )


def delivered(result: Any) -> Any:
    """What the host hands the model: a :class:`HostToolError`'s own answer, else as is."""
    return result.result if isinstance(result, HostToolError) else result


def block(code: str, message: str, hint: str, **details: Any) -> ToolResult:
    """What the model gets instead of a blocked tool's result: never a bare error."""
    error = {"code": code, "message": message, "hint": hint, **details}
    return ToolResult(structuredContent={"error": error}, isError=True)
