"""Hermes: who is calling, and the ``tool_execution`` middleware that meters host tools.

Hermes 0.19.0 hands a plugin's command handlers only the argument string and its tool handlers
and middleware only a ``session_id``. The sender arrives elsewhere: ``pre_llm_call`` receives
``sender_id``, ``platform`` and ``session_id`` before each turn (:class:`Senders` maps the session
to its sender), and ``pre_gateway_dispatch`` receives each inbound gateway message before Hermes
dispatches it, on the same asyncio task that then awaits the plugin command; a context variable set
there names the sender to that command (a CLI command, where no such hook fires, names nobody).
Where Hermes names nobody, the plugin acts as the gateway's own account, and logs that it does.
"""

from __future__ import annotations

import asyncio
import contextvars
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
        from ..selling.ways_in.metering import ToolFailed, block

        arguments = dict(args) if isinstance(args, dict) else {}
        ctx = ToolCallContext(
            name, arguments, _text(tool_call_id) or uuid.uuid4().hex, senders.caller(session_id)
        )

        async def run_tool() -> Any:
            return await asyncio.to_thread(next_call, args)

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
        return render(result) if isinstance(result, ToolResult) else result

    return svc_tool_execution
