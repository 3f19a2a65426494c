"""Hermes: who is calling, and the ``tool_execution`` middleware that meters host tools.

Hermes 0.19.0 hands a plugin's command handlers only the argument string and its tool handlers
and middleware only a ``session_id``. The sender arrives elsewhere: ``pre_llm_call`` receives
``sender_id``, ``platform`` and ``session_id`` before each turn (:class:`Senders` maps the session
to its sender), and ``pre_gateway_dispatch`` receives each inbound gateway message before Hermes
dispatches it, on the same asyncio task that then awaits the plugin command; a context variable set
there names the message's platform and sender to that command, the platform even when the message
has no user id (a Telegram channel post, an anonymous admin): such a command has no account. A
command is the local console's only when no gateway message names it and it runs as a loop of its
own, as the CLI and TUI run plugin commands (``resolve_plugin_command_result``: ``asyncio.run``);
the gateway awaits it inside the message's task. A turn of a gateway platform without a sender
leaves its session without an account (its tools are refused, never run as the previous sender
or the operator); where Hermes names nobody for a tool's session (its CLI, TUI or a local run),
the plugin acts as the gateway's own account, and logs that it does.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..host import Caller, ToolCallContext, ToolResult
from ..redact import get_logger

if TYPE_CHECKING:
    from ..runtime import PluginRuntime
    from ..selling.ways_in.metering import ToolMeter

log = get_logger("svc_gateway.hosts.hermes")

SESSIONS_KEPT = 10_000
#: the platform when a gateway message names none (never empty: an empty channel is the console)
UNKNOWN_PLATFORM = "gateway"
#: the platforms Hermes itself gives its own terminal agents (never a gateway message's)
CONSOLE_PLATFORMS = frozenset({"", "cli", "tui", "local"})
#: what a tool of a gateway session without a sender answers
NO_SENDER = (
    "no_account",
    "This message came without a sender, so it has no payments account on this gateway",
    "Send it from an account the chat platform identifies.",
)


@dataclass(frozen=True)
class GatewayMessage:
    """Where the gateway message being handled came from: its platform, and its sender when
    the message has one."""

    platform: str
    sender_id: str | None = None


#: the gateway message being handled on this asyncio task (read by a plugin command)
_GATEWAY_MESSAGE: contextvars.ContextVar[GatewayMessage | None] = contextvars.ContextVar(
    "svc_gateway_message", default=None
)


#: where Hermes's tool registry logs the exception of a tool it ran (``registry.dispatch``)
REGISTRY_LOGGER = "tools.registry"
#: the errors Hermes's registry logged for the metered call running in this context
_TOOL_ERRORS: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "svc_tool_errors", default=None
)


class _RegistryErrors(logging.Filter):
    """Notes, for the metered call running in this context, each error Hermes's registry
    logs: its tool raised (the registry turned the exception into the model's answer)."""

    def filter(self, record: logging.LogRecord) -> bool:
        seen = _TOOL_ERRORS.get()
        if seen is not None and record.levelno >= logging.ERROR:
            kind, error = record.exc_info[:2] if record.exc_info else (None, None)
            name = kind.__name__ if kind is not None else "error"
            seen.append((name, f"{name}: {error}" if error is not None else name))
        return True


_REGISTRY_FILTER = _RegistryErrors()

#: the metered call (tool name, ``tool_call_id``) whose tool runs in this context: Hermes
#: 0.19.0's concurrent path wraps one registry tool in the middleware twice
#: (``agent_runtime_helpers.invoke_tool`` around ``model_tools.handle_function_call``), and the
#: inner pass, inside the outer's ``next_call``, is the same call: the outer meters it
_METERED_CALL: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "svc_metered_call", default=None
)


def _watch_registry() -> None:
    registry_log = logging.getLogger(REGISTRY_LOGGER)
    if _REGISTRY_FILTER not in registry_log.filters:
        registry_log.addFilter(_REGISTRY_FILTER)


def run_watched(
    next_call: Callable[..., Any], args: Any, call: tuple[str, str] | None = None
) -> Any:
    """``next_call(args)`` (a thread of its own) for the metered ``call`` (tool name, call id);
    a :class:`HostToolError` around its result when Hermes's registry caught the tool's
    exception on the way."""
    from ..selling.ways_in.tool_results import HostToolError

    seen: list[tuple[str, str]] = []
    token = _TOOL_ERRORS.set(seen)
    running = _METERED_CALL.set(call)
    try:
        result = next_call(args)
    finally:
        _METERED_CALL.reset(running)
        _TOOL_ERRORS.reset(token)
    if seen:
        kind, detail = seen[0]
        log.info("svc: Hermes's registry caught %s from the metered tool; not charged", kind)
        return HostToolError(result, detail)  # the model gets the failure, not ``result``
    return result


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class Senders:
    """``session_id`` → the chat user Hermes last named for it, or ``None`` for a gateway turn
    without a sender (thread-safe, bounded)."""

    def __init__(self, kept: int = SESSIONS_KEPT) -> None:
        self._lock = threading.Lock()
        self._kept = kept
        self._map: OrderedDict[str, Caller | None] = OrderedDict()
        self._anonymous: set[str] = set()

    def remember(self, session_id: Any, sender_id: Any, platform: Any) -> None:
        session, sender = _text(session_id), _text(sender_id)
        where = _text(platform) or ""
        if session is None or (sender is None and where.lower() in CONSOLE_PLATFORMS):
            return
        with self._lock:
            self._map[session] = Caller(sender, where) if sender is not None else None
            self._map.move_to_end(session)
            while len(self._map) > self._kept:
                self._map.popitem(last=False)

    def caller(self, session_id: Any) -> Caller | None:
        session = _text(session_id)
        if session is None:
            return None
        with self._lock:
            found = self._map.get(session)
            first = session not in self._map and session not in self._anonymous
            if first and len(self._anonymous) < self._kept:
                self._anonymous.add(session)
        if first:
            log.info(
                "Hermes named no sender for session %s: the svc plugin acts as the gateway's "
                "own account there",
                session,
            )
        return found

    def unidentified(self, session_id: Any) -> bool:
        """The session's last turn came from a gateway platform without a sender."""
        session = _text(session_id)
        with self._lock:
            return session is not None and session in self._map and self._map[session] is None


def pre_gateway_dispatch(event: Any = None, **_kwargs: Any) -> None:
    """Remember where the gateway message being dispatched came from (for a plugin command):
    its platform always, its sender when it has one."""
    message = GatewayMessage(UNKNOWN_PLATFORM)  # set first: a message read badly has nobody
    try:
        _GATEWAY_MESSAGE.set(message)
        source = getattr(event, "source", None)
        user = getattr(source, "user_id", None)
        platform = getattr(getattr(source, "platform", None), "value", None)
        sender = str(user) if isinstance(user, (str, int)) and str(user) else None
        _GATEWAY_MESSAGE.set(GatewayMessage(_text(platform) or UNKNOWN_PLATFORM, sender))
    except Exception as error:  # a hook must never break a message
        log.warning("svc: could not read the message sender (%s)", type(error).__name__)


def gateway_message() -> GatewayMessage | None:
    """The gateway message whose plugin command runs now (``None``: no gateway message)."""
    return _GATEWAY_MESSAGE.get()


def runs_as_own_loop(code: object) -> bool:
    """The coroutine running now is the root of its task and runs ``code``: the command was
    started with ``asyncio.run`` (how Hermes's CLI and TUI run a plugin command), not awaited
    inside a gateway message's task."""
    task = asyncio.current_task()
    root = task.get_coro() if task is not None else None
    return getattr(root, "cr_code", None) is code


def make_tool_middleware(
    meter: ToolMeter,
    senders: Senders,
    runtime: PluginRuntime,
    render: Callable[[object], str],
    guard: MeteringGuard | None = None,
) -> Callable[..., Any]:
    """A synchronous ``tool_execution`` middleware: meters the host's tools named in
    ``meteredTools`` through the paid flow on the plugin loop. It never raises (Hermes would
    run the tool anyway): every failure blocks the tool with a result of its own. A tool that
    failed (raised, or its exception caught by Hermes's registry) answers with the failure
    only: neither the tool's output nor the registry's full error text."""
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
        if guard is not None:
            guard.saw(tool_call_id)
        call_id = _text(tool_call_id) or uuid.uuid4().hex
        if _METERED_CALL.get() == (name, call_id):
            return next_call(args)  # Hermes wrapped this call twice: the outer pass meters it
        from ..selling.ways_in.tool_results import block, delivered

        if senders.unidentified(session_id):
            return render(block(*NO_SENDER))
        arguments = dict(args) if isinstance(args, dict) else {}
        ctx = ToolCallContext(name, arguments, call_id, senders.caller(session_id))

        async def run_tool() -> Any:
            return await asyncio.to_thread(run_watched, next_call, args, (name, call_id))

        try:
            result = runtime.run_sync(meter.meter(ctx, run_tool), timeout=wait)
        except Exception as error:
            log.warning("svc: metering %s failed (%s)", name, type(error).__name__)
            result = block(
                "metering_failed",
                f"{name} could not be metered; it did not run and nothing was charged",
                "Try again; if it keeps failing, tell the gateway's operator.",
            )
        result = delivered(result)
        return render(result) if isinstance(result, ToolResult) else result

    return svc_tool_execution


#: ``post_tool_call`` statuses of a tool that ran (not one blocked or cancelled before it ran)
RAN = frozenset({"ok", "error", "timeout"})
#: what a metered tool answers where the plugin cannot meter it
UNMETERED = (
    "{name} is a paid tool, and the svc plugin cannot meter it here: {why}. It did not run and "
    "nothing was charged. Use it from the Hermes gateway or interactive chat, or ask the "
    "gateway's operator."
)


class MeteringGuard:
    """Metering fails closed: ``pre_tool_call`` blocks a metered tool wherever the plugin's
    ``tool_execution`` middleware would not meter it.

    Hermes calls the middleware from its tool dispatch, but not on every surface (upstream:
    query mode, cron, dashboard and TUI workers that never ran plugin discovery, #105827; a
    "safe worker" mode with no middleware at all), and Hermes without ``register_middleware``
    has none. Before each metered call the guard checks that the middleware is registered and
    still in the list Hermes runs; after each, ``post_tool_call`` tells it whether the call it
    let through reached the middleware. A metered call that ran without it (seen by id) is
    logged at ERROR and every later metered call of this process is blocked."""

    def __init__(self, is_metered: Callable[[str], bool], kept: int = SESSIONS_KEPT) -> None:
        self._is_metered = is_metered
        self._kept = kept
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()
        #: the middleware as registered, and the list Hermes keeps it in (``None``: not known)
        self.middleware: Callable[..., Any] | None = None
        self.listed: Callable[[], list[Any] | None] = lambda: None
        #: why metered tools are blocked for the rest of this process (``None``: they are not)
        self.bypassed: str | None = None

    def installed(self, middleware: Callable[..., Any], listed: Callable[[], Any]) -> None:
        self.middleware, self.listed = middleware, listed

    def saw(self, call_id: Any) -> None:
        """The middleware metered this call (called by it, first thing)."""
        if not isinstance(call_id, str) or not call_id:
            return
        with self._lock:
            self._seen[call_id] = None
            while len(self._seen) > self._kept:
                self._seen.popitem(last=False)

    def why_not(self) -> str | None:
        """Why the middleware would not meter a call now (``None``: it would)."""
        if self.bypassed is not None:
            return self.bypassed
        if self.middleware is None:
            return "this Hermes has no tool_execution middleware (Hermes 0.19.0 or newer needed)"
        listed = self.listed()
        if isinstance(listed, list) and self.middleware not in listed:
            return "its tool_execution middleware is not active in this Hermes process"
        return None

    def pre_tool_call(self, tool_name: Any = None, **_kwargs: Any) -> dict[str, str] | None:
        name = tool_name if isinstance(tool_name, str) else ""
        if not name or not self._is_metered(name):
            return None
        why = self.why_not()
        if why is None:
            return None
        log.warning("svc: %s blocked: %s", name, why)
        return {"action": "block", "message": UNMETERED.format(name=name, why=why)}

    def post_tool_call(
        self, tool_name: Any = None, tool_call_id: Any = None, status: Any = None, **_kw: Any
    ) -> None:
        name = tool_name if isinstance(tool_name, str) else ""
        if status not in RAN or not name or not isinstance(tool_call_id, str) or not tool_call_id:
            return
        if not self._is_metered(name):
            return
        with self._lock:
            if tool_call_id in self._seen:
                return
            first = self.bypassed is None
            self.bypassed = "Hermes ran a paid tool here without its tool_execution middleware"
        if first:
            log.error(
                "svc: Hermes ran the metered tool %s (call %s) without the svc plugin's "
                "tool_execution middleware, so it was not charged; every metered tool is "
                "blocked in this process from now on",
                name,
                tool_call_id,
            )


def check_metered_names(meter: ToolMeter) -> Callable[..., None]:
    """A ``pre_llm_call`` callback that, at the first turn (every plugin's tools and the MCP
    servers' are registered by then, unlike at ``register()``), warns about each ``meteredTools``
    entry that names no tool of Hermes's registry."""
    done = threading.Event()

    def svc_check_metered_tools(**_kwargs: Any) -> None:
        if done.is_set():
            return
        done.set()
        try:
            from tools.registry import registry

            names = [str(name) for name in registry.get_all_tool_names()]
        except Exception as error:  # a Hermes without this registry: nothing to compare with
            log.info("svc: Hermes's tools could not be listed (%s)", type(error).__name__)
            return
        meter.warn_unoffered(names)

    return svc_check_metered_tools
