"""The host contract: everything a chat gateway needs to load this plugin.

A host hands :func:`svc_gateway.register` an object satisfying :class:`GatewayAPI`. The plugin
registers nine tools, its commands, one ``before_prompt_build`` hook and (for a host that offers
it) one ``around_tool_call`` handler through it. This module is the whole public surface a host
author has to read.

A hosted gateway serving many chat users says who is calling: tool handlers take
``handler(params, caller=None)`` with a :class:`Caller`; commands and prompts carry
``sender_id``/``channel``. A host that passes nothing keeps single-user behaviour.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import quote

if TYPE_CHECKING:  # the HTTP server is imported only by a plugin that serves something
    from aiohttp import web


#: ``json.dumps(data, ensure_ascii=False)`` with its encoder made once (``dumps`` with any
#: argument of its own builds a new encoder per call: a third of a tool result's cost).
_to_json = json.JSONEncoder(ensure_ascii=False).encode


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer, in the MCP tool-result convention."""

    structuredContent: dict[str, Any]
    isError: bool = False
    content: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.content:
            text = _to_json(self.structuredContent)
            object.__setattr__(self, "content", [{"type": "text", "text": text}])

    @property
    def text(self) -> str:
        """The JSON text a host shows the model."""
        return "".join(str(c.get("text", "")) for c in self.content if c.get("type") == "text")

    @classmethod
    def ok(cls, data: dict[str, Any]) -> ToolResult:
        return cls(structuredContent=data, isError=False)

    @classmethod
    def error(cls, code: str, message: str, hint: str) -> ToolResult:
        """An error result: what went wrong and what to do next."""
        return cls(
            structuredContent={"error": {"code": code, "message": message, "hint": hint}},
            isError=True,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": list(self.content),
            "structuredContent": self.structuredContent,
            "isError": self.isError,
        }


@dataclass(frozen=True)
class Caller:
    """The chat user behind a call, as the host reports them: who (``sender_id``) on which
    platform or chat (``channel``). Two callers are the same user when both fields match."""

    sender_id: str
    channel: str = ""

    @property
    def identity(self) -> str:
        """``channel:sender_id``: the key the user's account is stored under. Both fields exactly
        as the host gave them (``Slack`` and ``slack``, ``team.a`` and ``team_a`` are four
        channels), and never ambiguous: a channel holding ``:`` or ``%`` is percent-encoded, so
        ``("a:b", "c")`` and ``("a", "b:c")`` never share an account."""
        channel = self.channel
        if ":" in channel or "%" in channel:
            channel = quote(channel, safe="")
        return f"{channel}:{self.sender_id}"


class ToolHandler(Protocol):
    """``await handler(params)``, or ``await handler(params, caller)`` (also ``caller=...``)."""

    def __call__(
        self, params: dict[str, Any], /, caller: Caller | None = None
    ) -> Awaitable[ToolResult]: ...


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what the model reads about it, its JSON Schema and its handler."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler


@dataclass(frozen=True)
class CommandContext:
    """Who typed a slash command, and where.

    ``is_local_console`` is the host saying the command was typed at the gateway's own console
    (the operator's terminal), never a chat message. With ``perUserAccounts`` only such a
    command, or one from a sender listed in ``operatorIds``, acts on the gateway's own account:
    a command without a sender and without this flag has no account."""

    args: str = ""
    sender_id: str | None = None
    channel: str | None = None
    is_authorized_sender: bool = True
    is_local_console: bool = False


CommandHandler = Callable[[CommandContext], Awaitable[str]]


@dataclass(frozen=True)
class CommandSpec:
    """One slash command (name without the leading ``/``)."""

    name: str
    description: str
    accepts_args: bool
    handler: CommandHandler
    args_hint: str = ""


@dataclass(frozen=True)
class PromptContext:
    """What a host knows about the prompt about to be built."""

    sender_id: str | None = None
    channel: str | None = None
    session_id: str | None = None
    user_message: str | None = None


HookHandler = Callable[[PromptContext], Awaitable[str | None]]

#: Text to prepend to the model's context: ``await handler(PromptContext) -> str | None``.
BEFORE_PROMPT_BUILD = "before_prompt_build"
#: Around each of the host's own tool calls: ``await handler(ToolCallContext, call_next)``.
AROUND_TOOL_CALL = "around_tool_call"


@dataclass(frozen=True)
class ToolCallContext:
    """One call of a host's own tool, as the host hands it to an ``around_tool_call`` handler.

    ``call_id`` is the host's id of this call (the model's tool-call id): the same call is
    never charged twice. ``caller`` is ``None`` when the host does not know who is calling."""

    tool_name: str
    arguments: dict[str, Any]
    call_id: str
    caller: Caller | None = None


#: Runs the host's tool once and returns its result (any value the host's tools return).
CallNext = Callable[[], Awaitable[Any]]
#: ``await handler(ctx, call_next)``: the tool's result, or an error ``ToolResult`` when blocked.
AroundToolCall = Callable[[ToolCallContext, CallNext], Awaitable[Any]]


@runtime_checkable
class GatewayAPI(Protocol):
    """What a host hands to ``svc_gateway.register(api)``.

    ``http_app`` is optional: a host that already serves an ``aiohttp.web.Application`` exposes
    it and the paid endpoint is mounted there; otherwise the plugin serves its own.
    """

    @property
    def plugin_config(self) -> Mapping[str, Any]: ...

    @property
    def logger(self) -> logging.Logger: ...

    def register_tool(self, spec: ToolSpec) -> None: ...

    def register_command(self, spec: CommandSpec) -> None: ...

    def on(self, event: str, handler: Any) -> None: ...


class CollectingGateway:
    """A :class:`GatewayAPI` that records what the plugin registers, for hosts to dispatch.

    Both shipped hosts build on it; a host author can too. Tool and command names are unique.
    """

    def __init__(self, plugin_config: Mapping[str, Any], logger: logging.Logger) -> None:
        self._config: dict[str, Any] = dict(plugin_config)
        self._logger = logger
        self.tools: dict[str, ToolSpec] = {}
        self.commands: dict[str, CommandSpec] = {}
        self.hooks: dict[str, list[HookHandler]] = {}
        #: ``around_tool_call`` handlers, outermost first.
        self.around_tool_call: list[AroundToolCall] = []

    @property
    def plugin_config(self) -> Mapping[str, Any]:
        return self._config

    @property
    def logger(self) -> logging.Logger:
        return self._logger

    def register_tool(self, spec: ToolSpec) -> None:
        if spec.name in self.tools:
            raise ValueError(f"tool {spec.name} is already registered")
        self.tools[spec.name] = spec

    def register_command(self, spec: CommandSpec) -> None:
        if spec.name in self.commands:
            raise ValueError(f"command /{spec.name} is already registered")
        self.commands[spec.name] = spec

    def on(self, event: str, handler: Any) -> None:
        if event == AROUND_TOOL_CALL:
            self.around_tool_call.append(handler)
            return
        if event != BEFORE_PROMPT_BUILD:
            self._logger.warning("ignoring unknown plugin event %r", event)
            return
        self.hooks.setdefault(event, []).append(handler)

    async def run_host_tool(self, ctx: ToolCallContext, tool: CallNext) -> Any:
        """Run one of the host's own tools through every ``around_tool_call`` handler."""

        async def chain(index: int) -> Any:
            if index == len(self.around_tool_call):
                return await tool()
            return await self.around_tool_call[index](ctx, lambda: chain(index + 1))

        return await chain(0)


def host_http_app(api: GatewayAPI) -> web.Application | None:
    """The host's aiohttp application, when it has one."""
    from aiohttp import web

    app = getattr(api, "http_app", None)
    return app if isinstance(app, web.Application) else None
