"""Metering AstrBot's own tools (``meteredTools``): its tool executor, wrapped.

AstrBot's tool hooks only observe (an exception is logged, a return value ignored), so they can
neither block a tool nor answer for it. The one place every tool call passes in AstrBot 4.29 (the
main agent's, plugin agents', handoffs, MCP and built-in tools) is the private classmethod
``astrbot.core.astr_agent_tool_exec.FunctionToolExecutor.execute``, an async generator called as
``execute(tool=..., run_context=..., **tool_args)``. :class:`ExecutorWrap` checks at start that
it is there with exactly that shape (and refuses the plugin loudly when an AstrBot release changed
it: never meter silently wrong), replaces it with a wrapper that runs each metered call through
the plugin's tool meter (admit, run the original, settle), and puts the original back when the
plugin is terminated.

The wrapper never sees the model's tool-call id, so each call gets an id of its own. The metering
runs on the plugin loop in its own task, shielded from AstrBot's: a user's ``/stop`` cancels the
tool (an unfinished call is not charged) but never a settle under way. A tool whose result is an
error (it raised, or an MCP result with ``isError``) is not charged, and the model gets that
failure only (the error's type and short message), never what the tool produced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from ...host import Caller, ToolCallContext, ToolResult
from ...redact import get_logger
from ...runtime import RuntimeClosed
from ..hermes_adapters import result_json

if TYPE_CHECKING:
    from ...selling.ways_in.metering import ToolMeter

log = get_logger("svc_gateway.hosts.astrbot")

EXECUTOR = "astrbot.core.astr_agent_tool_exec.FunctionToolExecutor.execute"
#: ``execute``'s parameters in AstrBot 4.29: (cls, tool, run_context, **tool_args)
EXPECTED = (
    ("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD),
    ("tool", inspect.Parameter.POSITIONAL_OR_KEYWORD),
    ("run_context", inspect.Parameter.POSITIONAL_OR_KEYWORD),
    ("tool_args", inspect.Parameter.VAR_KEYWORD),
)
#: set on our wrapper: a second svc plugin in one process must not wrap it again
MARK = "__svc_metering__"


class ExecutorShapeError(RuntimeError):
    """AstrBot's tool executor is not the shape this adapter wraps: metering refuses to start."""


class ToolStopped(Exception):
    """The tool was cancelled before it finished (a user's ``/stop``): not charged."""


def executor_class() -> type[Any]:
    try:
        from astrbot.core.astr_agent_tool_exec import FunctionToolExecutor
    except ImportError as exc:
        raise ExecutorShapeError(f"{EXECUTOR} is gone ({exc})") from None
    cls: type[Any] = FunctionToolExecutor
    return cls


def check_shape(cls: type[Any]) -> Any:
    """``cls.__dict__["execute"]`` when it is the classmethod async generator we wrap."""
    raw = cls.__dict__.get("execute")
    if not isinstance(raw, classmethod):
        raise ExecutorShapeError(f"{EXECUTOR} is not a classmethod of its own")
    func = raw.__func__
    if getattr(func, MARK, False):
        raise ExecutorShapeError(f"{EXECUTOR} is already wrapped by another svc plugin")
    if not inspect.isasyncgenfunction(func):
        raise ExecutorShapeError(f"{EXECUTOR} is no longer an async generator")
    shape = tuple((p.name, p.kind) for p in inspect.signature(func).parameters.values())
    if shape != EXPECTED:
        names = ", ".join(name for name, _ in shape)
        raise ExecutorShapeError(
            f"{EXECUTOR} takes ({names}), not (cls, tool, run_context, **tool_args)"
        )
    return raw


def _is_error(item: Any) -> bool:
    return bool(getattr(item, "isError", False)) and hasattr(item, "content")


def tool_text(text: str) -> Any:
    """A ``CallToolResult`` holding one text part: what a blocked call answers the model."""
    import mcp.types

    return mcp.types.CallToolResult(content=[mcp.types.TextContent(type="text", text=text)])


class ExecutorWrap:
    """The installed wrapper; :meth:`restore` undoes it."""

    def __init__(
        self,
        meter: ToolMeter,
        caller_of: Callable[[Any], Caller | None],
        cls: type[Any],
        original: Any,
    ) -> None:
        self.meter = meter
        self.caller_of = caller_of
        self.cls = cls
        self.original = original
        self.active = True
        self.installed = classmethod(self._make())

    @classmethod
    def install(cls, meter: ToolMeter, caller_of: Callable[[Any], Caller | None]) -> ExecutorWrap:
        """Wrap the executor, or raise :class:`ExecutorShapeError` naming what changed."""
        target = executor_class()
        try:
            original = check_shape(target)
        except ExecutorShapeError as exc:
            raise ExecutorShapeError(
                f"meteredTools cannot be metered on this AstrBot: {exc}. The svc plugin refuses "
                "to start rather than let those tools run unpaid; use AstrBot 4.29.x or remove "
                "meteredTools from the settings."
            ) from None
        wrap = cls(meter, caller_of, target, original)
        setattr(target, "execute", wrap.installed)  # noqa: B010 (a class attribute, on purpose)
        log.info("svc: metering %s through %s", ", ".join(sorted(meter.prices)), EXECUTOR)
        return wrap

    def restore(self) -> None:
        """Put the original back (a wrapper installed over ours stays; ours then passes through)."""
        self.active = False
        if self.cls.__dict__.get("execute") is self.installed:
            setattr(self.cls, "execute", self.original)  # noqa: B010
        else:
            log.warning("svc: %s was wrapped again after us; ours now passes every call", EXECUTOR)

    # -- the wrapper -------------------------------------------------------------------------

    def _make(self) -> Callable[..., AsyncIterator[Any]]:
        original = self.original.__func__

        async def execute(
            executor: type[Any], tool: Any, run_context: Any, **tool_args: Any
        ) -> AsyncIterator[Any]:
            name = getattr(tool, "name", None)
            if not self.active or not isinstance(name, str) or self.meter.price_of(name) is None:
                async with aclosing(original(executor, tool, run_context, **tool_args)) as items:
                    async for item in items:
                        yield item
                return
            run = original(executor, tool, run_context, **tool_args)
            async for item in self._metered(name, run_context, tool_args, run):
                yield item

        setattr(execute, MARK, True)
        execute.__qualname__ = "FunctionToolExecutor.execute (svc metering)"
        return execute

    async def _metered(
        self, name: str, run_context: Any, tool_args: dict[str, Any], run: Any
    ) -> AsyncIterator[Any]:
        from ...selling.ways_in.tool_results import HostToolError

        event = getattr(getattr(run_context, "context", None), "event", None)
        caller = self.caller_of(event) if event is not None else None
        ctx = ToolCallContext(name, dict(tool_args), f"astrbot-{uuid.uuid4().hex}", caller)
        host_loop = asyncio.get_running_loop()
        started: list[concurrent.futures.Future[Any]] = []

        async def run_original() -> Any:  # on AstrBot's loop
            async with aclosing(run) as gen:
                items = [item async for item in gen]
            if any(_is_error(item) for item in items):
                return HostToolError(items)  # failed: not charged, and not shown the model
            return items

        async def run_tool() -> Any:  # on the plugin loop, inside the paid flow
            future = asyncio.run_coroutine_threadsafe(run_original(), host_loop)
            started.append(future)
            try:
                return await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if future.cancelled() and not (task and task.cancelling()):
                    raise ToolStopped(name) from None
                raise

        try:
            job = self.meter.operator.runtime.submit(self.meter.meter(ctx, run_tool))
        except RuntimeClosed:  # the generator never started: nothing to close
            yield tool_text(result_json(_unavailable(name)))
            return
        try:
            result = await asyncio.shield(asyncio.wrap_future(job))
        except asyncio.CancelledError:
            for future in started:
                future.cancel()  # the tool stops; the meter records it as failed, uncharged
            raise
        if isinstance(result, ToolResult):  # blocked (price, balance, how to buy), or failed
            yield tool_text(result_json(result))
            return
        for item in with_text_parts(result if isinstance(result, list) else [result]):
            yield item


def with_text_parts(items: list[Any]) -> list[Any]:
    """The executor's results with the meter's text (a top-up's notice: AstrBot's executor
    yields no ``str`` of its own) folded into the last ``CallToolResult`` as a text part, so
    the model gets one tool message that carries both."""
    import mcp.types

    out: list[Any] = []
    for item in items:
        if not isinstance(item, str):
            out.append(item)
            continue
        part = mcp.types.TextContent(type="text", text=item)
        if out and isinstance(out[-1], mcp.types.CallToolResult):
            out[-1] = out[-1].model_copy(update={"content": [*out[-1].content, part]})
        else:
            out.append(mcp.types.CallToolResult(content=[part]))
    return out


def _unavailable(name: str) -> ToolResult:
    return ToolResult.error(
        "metering_unavailable",
        f"{name} is a paid tool and the svc plugin is shut down; it did not run",
        "Restart AstrBot, or ask its operator.",
    )
