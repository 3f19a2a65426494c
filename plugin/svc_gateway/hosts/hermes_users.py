"""Hermes: who is calling, and the ``tool_execution`` middleware that meters host tools.

Hermes 0.19.0 hands a plugin's command handlers only the argument string and its tool handlers
and middleware only a ``session_id``. The sender arrives elsewhere: ``pre_llm_call`` receives
``sender_id``, ``platform`` and ``session_id`` before each turn (:class:`Senders` maps the session
to its sender), and ``pre_gateway_dispatch`` receives each inbound gateway message before Hermes
dispatches it, on the same asyncio task that then awaits the plugin command; a context variable set
there names the sender to that command (a CLI command, where no such hook fires, names nobody).
Where Hermes names nobody, the plugin acts as the gateway's own account, and logs that it does.

A metered tool failed (and is not charged) when Hermes says so: the call raised, or Hermes's tool
registry caught the tool's exception (it logs it, on ``tools.registry``, and answers the model
with error JSON). What the tool itself returned is never parsed for an ``"error"``: it may be its
user's own output.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..host import Caller, ToolCallContext, ToolResult
from ..redact import get_logger

if TYPE_CHECKING:
    from ..runtime import PluginRuntime
    from ..selling.ways_in.metering import ToolMeter

log = get_logger("svc_gateway.hosts.hermes")

SESSIONS_KEPT = 10_000
#: the sender of the gateway message being handled on this asyncio task (a plugin command)
_COMMAND_SENDER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "svc_command_sender", default=None
)


#: where Hermes's tool registry logs the exception of a tool it ran (``registry.dispatch``)
REGISTRY_LOGGER = "tools.registry"
#: the errors Hermes's registry logged for the metered call running in this context
_TOOL_ERRORS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "svc_tool_errors", default=None
)


class _RegistryErrors(logging.Filter):
    """Notes, for the metered call running in this context, each error Hermes's registry
    logs: its tool raised (the registry turned the exception into the model's answer)."""

    def filter(self, record: logging.LogRecord) -> bool:
        seen = _TOOL_ERRORS.get()
        if seen is not None and record.levelno >= logging.ERROR:
            kind = record.exc_info[0] if record.exc_info else None
            seen.append(kind.__name__ if kind is not None else "error")
        return True


_REGISTRY_FILTER = _RegistryErrors()


def _watch_registry() -> None:
    registry_log = logging.getLogger(REGISTRY_LOGGER)
    if _REGISTRY_FILTER not in registry_log.filters:
        registry_log.addFilter(_REGISTRY_FILTER)


def run_watched(next_call: Callable[..., Any], args: Any) -> Any:
    """``next_call(args)`` (a thread of its own); a :class:`HostToolError` around its result
    when Hermes's registry caught the tool's exception on the way."""
    from ..selling.ways_in.metering import HostToolError

    seen: list[str] = []
    token = _TOOL_ERRORS.set(seen)
    try:
        result = next_call(args)
    finally:
        _TOOL_ERRORS.reset(token)
    if seen:
        log.info("svc: Hermes's registry caught %s from the metered tool; not charged", seen[0])
        return HostToolError(result)
    return result


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class Senders:
    """``session_id`` → the chat user Hermes last named for it (thread-safe, bounded)."""

    def __init__(self, kept: int = SESSIONS_KEPT) -> None:
        self._lock = threading.Lock()
        self._kept = kept
        self._map: OrderedDict[str, Caller] = OrderedDict()
        self._anonymous: set[str] = set()

    def remember(self, session_id: Any, sender_id: Any, platform: Any) -> None:
        session, sender = _text(session_id), _text(sender_id)
        if session is None or sender is None:
            return
        with self._lock:
            self._map[session] = Caller(sender, _text(platform) or "")
            self._map.move_to_end(session)
            while len(self._map) > self._kept:
                self._map.popitem(last=False)

    def caller(self, session_id: Any) -> Caller | None:
        session = _text(session_id)
        if session is None:
            return None
        with self._lock:
            found = self._map.get(session)
            first = found is None and session not in self._anonymous
            if first and len(self._anonymous) < self._kept:
                self._anonymous.add(session)
        if first:
            log.info(
                "Hermes named no sender for session %s: the svc plugin acts as the gateway's "
                "own account there",
                session,
            )
        return found


def pre_gateway_dispatch(event: Any = None, **_kwargs: Any) -> None:
    """Remember who sent the gateway message being dispatched (for a plugin command)."""
    try:
        source = getattr(event, "source", None)
        user = _text(getattr(source, "user_id", None))
        platform = getattr(getattr(source, "platform", None), "value", None)
        _COMMAND_SENDER.set(Caller(user, _text(platform) or "") if user else None)
    except Exception as error:  # a hook must never break a message
        log.warning("svc: could not read the message sender (%s)", type(error).__name__)


def command_caller() -> Caller | None:
    """The sender of the gateway message whose plugin command runs now, if Hermes said."""
    return _COMMAND_SENDER.get()


def make_tool_middleware(
    meter: ToolMeter,
    senders: Senders,
    runtime: PluginRuntime,
    render: Callable[[object], str],
) -> Callable[..., Any]:
    """A synchronous ``tool_execution`` middleware: meters the host's tools named in
    ``meteredTools`` through the paid flow on the plugin loop. It never raises (Hermes would
    run the tool anyway): every failure blocks the tool with a result of its own. A tool's own
    exception is re-raised as Hermes raised it."""
    config = meter.operator.config
    wait = config.handler_timeout_secs + 3 * config.paid_budget_secs + 5
    _watch_registry()

    def svc_tool_execution(
        tool_name: Any = None,
        args: Any = None,
        next_call: Callable[..., Any] | None = None,
        session_id: Any = None,
        tool_call_id: Any = None,
        **_kwargs: Any,
    ) -> Any:
        assert next_call is not None
        name = tool_name if isinstance(tool_name, str) else ""
        if meter.price_of(name) is None:
            return next_call(args)
        from ..selling.ways_in.metering import ToolFailed, block, delivered

        arguments = dict(args) if isinstance(args, dict) else {}
        ctx = ToolCallContext(
            name, arguments, _text(tool_call_id) or uuid.uuid4().hex, senders.caller(session_id)
        )

        async def run_tool() -> Any:
            return await asyncio.to_thread(run_watched, next_call, args)

        try:
            result = runtime.run_sync(meter.meter(ctx, run_tool), timeout=wait)
        except Exception as error:
            log.warning("svc: metering %s failed (%s)", name, type(error).__name__)
            result = block(
                "metering_failed",
                f"{name} could not be metered; it did not run and nothing was charged",
                "Try again; if it keeps failing, tell the gateway's operator.",
            )
        if isinstance(result, ToolFailed):
            raise result.error
        result = delivered(result)
        return render(result) if isinstance(result, ToolResult) else result

    return svc_tool_execution
