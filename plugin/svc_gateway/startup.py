"""Starting the plugin at first use: what register reads of a plain chat config, and the start.

A plain chat config (nothing sold, no shared state, no per-user accounts, on a host that
delivers commands) leaves register nothing to decide but the service URL. Register then hands
the host the tools, commands and prompt hook without validating the config: :class:`FirstUse`
validates it (``load_config``, pydantic) and builds the plugin once, at the first tool call,
command or prompt. A config the validation refuses is logged once at ERROR, and every entry
point answers it as the degraded plugin (:func:`register_degraded`, a config refused at
register) does: :class:`Misconfigured`, never a traceback.

What a config sells (:func:`start_selling`) starts on the plugin loop: before register returns,
or after it on a host that bounds how long loading may take (``background_start``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .api_keys import ConfigError
from .environments import ENVIRONMENTS, base_url_from_env
from .host import (
    BEFORE_PROMPT_BUILD,
    Caller,
    CommandContext,
    CommandHandler,
    CommandSpec,
    GatewayAPI,
    PromptContext,
    ToolHandler,
    ToolResult,
    ToolSpec,
)
from .menu import MENU
from .redact import get_logger
from .tools.catalogue import TOOL_NAMES, entry

if TYPE_CHECKING:
    import concurrent.futures

    from .account.core import PluginCore
    from .chat.accounts import UserAccounts
    from .chat.commands import Commands
    from .chat.context import BalanceContext
    from .config import PluginConfig
    from .service.checks import StartCheck

T = TypeVar("T")

#: Where a host's operator fixes the plugin settings, unless the host says (``config_location``).
DEFAULT_CONFIG_LOCATION = "the svc plugin section of the gateway's configuration"
#: What register decides on, by key: read raw only when the value is exactly the default as JSON
#: writes it (absent, false, {}, null); any other value is validated at register.
OFF_BY_DEFAULT: dict[str, object] = {
    "enablePaidEndpoint": False,
    "enablePaidMcp": False,
    "enablePaidA2A": False,
    "perUserAccounts": False,
    "meteredTools": {},
    "stateUrl": None,
}
#: The same fields (and ``baseUrl``) by the Python names ``PluginConfig`` also accepts.
FIELD_NAMES = (
    "enable_paid_endpoint",
    "enable_paid_mcp",
    "enable_paid_a2a",
    "per_user_accounts",
    "metered_tools",
    "state_url",
    "base_url",
)


def starts_at_first_use(raw: object, *, delivers_commands: bool = True) -> bool:
    """Whether ``raw`` is a plain chat config, whose validation register may leave to the
    first use.

    Register decides at start what sells (a paid endpoint, MCP, A2A, metered tools), where
    state is shared (``stateUrl``), whether chat users have accounts of their own and, on a host
    that delivers no commands, the approval mode; and says at start that no service URL is
    known. Each is read here only from a plain JSON value (see :data:`OFF_BY_DEFAULT`; ``baseUrl``
    a string, else ``environment`` one of the three and its ``SVC_<ENV>_BASE_URL`` set): for
    anything else the answer is ``False``, and register validates the config fully, as always.
    """
    if not isinstance(raw, Mapping) or not delivers_commands:
        return False
    if any(name in raw for name in FIELD_NAMES):
        return False
    for key, off in OFF_BY_DEFAULT.items():
        value = raw.get(key, off)
        if type(value) is not type(off) or value != off:
            return False
    base_url = raw.get("baseUrl")
    if base_url is not None:
        return isinstance(base_url, str) and bool(base_url.strip())
    environment = raw.get("environment")
    if environment not in ENVIRONMENTS:  # absent: the key's prefix or the default names it
        return False
    try:
        base_url_from_env(str(environment))
    except ConfigError:
        return False  # validated now: register says it as it always did
    return True


@dataclass(frozen=True)
class Misconfigured:
    """A configuration the plugin cannot run with, as every entry point answers it."""

    error: str
    message: str
    hint: str

    @classmethod
    def of(cls, api: GatewayAPI, error: ConfigError) -> Misconfigured:
        where = getattr(api, "config_location", None) or DEFAULT_CONFIG_LOCATION
        return cls(
            str(error),
            f"The svc plugin is not configured correctly: {error}",
            f"Fix it in {where}, then restart the gateway. The svc tools stay unavailable until "
            "then.",
        )

    def tool_result(self) -> ToolResult:
        return ToolResult.error("plugin_misconfigured", self.message, self.hint)

    def reply(self) -> str:
        return f"{self.message}. {self.hint}"

    def log(self) -> None:
        get_logger("svc_gateway").error("%s. %s", self.message, self.hint)


class FirstUse(Generic[T]):
    """``start()`` run once, by the first caller, from any thread; its value, or the
    :class:`Misconfigured` answer to the :class:`ConfigError` it raised (logged once)."""

    def __init__(self, start: Callable[[], T], api: GatewayAPI) -> None:
        self._start = start
        self._api = api
        self._lock = threading.Lock()
        #: set once, never changed: read without the lock
        self.done: T | Misconfigured | None = None

    @classmethod
    def started(cls, value: T, api: GatewayAPI) -> FirstUse[T]:
        """A value built at register already."""
        first = cls(lambda: value, api)
        first.done = value
        return first

    def get(self) -> T | Misconfigured:
        """The value, starting it here (blocking this thread) if nobody has yet."""
        done = self.done
        if done is not None:
            return done
        with self._lock:
            if self.done is None:
                try:
                    self.done = self._start()
                except ConfigError as error:
                    answer = Misconfigured.of(self._api, error)
                    answer.log()
                    self.done = answer
            return self.done

    async def aget(self) -> T | Misconfigured:
        """:meth:`get` for a coroutine: the start (file, keyring) runs in a worker thread."""
        done = self.done
        return done if done is not None else await asyncio.to_thread(self.get)


def register_degraded(api: GatewayAPI, error: ConfigError) -> None:
    """A config refused at register (``on_config_error="degrade"``): the tools and two commands,
    each answering the error and how to fix it."""
    answer = Misconfigured.of(api, error)

    async def tool_handler(_params: dict[str, Any], /, caller: Caller | None = None) -> ToolResult:
        return answer.tool_result()

    async def command_handler(_ctx: CommandContext) -> str:
        return answer.reply()

    for name in TOOL_NAMES:
        stored = entry(name)
        api.register_tool(ToolSpec(name, stored.description, stored.parameters, tool_handler))
    api.register_command(
        CommandSpec(
            "svc_login",
            "Log in to the payments service (the plugin config is invalid: run /svc_login status)",
            True,
            command_handler,
            args_hint="[status]",
        )
    )
    api.register_command(
        CommandSpec("svc_logout", "Log out of the payments service", False, command_handler)
    )
    answer.log()


class PromptHandler(Protocol):
    """The ``before_prompt_build`` handler register builds (``svc_gateway.PromptHook``)."""

    def peek(self, ctx: PromptContext | None = None) -> str | object | None: ...

    def __call__(self, ctx: PromptContext) -> Awaitable[str | None]: ...


@dataclass
class LivePlugin:
    """The started plugin: what the handle exposes, and what the host's entry points call."""

    core: PluginCore
    commands: Commands
    context: BalanceContext
    accounts: UserAccounts | None
    tools: dict[str, ToolSpec]
    command_specs: dict[str, CommandSpec]
    hook: PromptHandler


def register_first_use(api: GatewayAPI, plugin: FirstUse[LivePlugin]) -> None:
    """Hand the host the nine tools (from the stored catalogue), the commands (from the menu)
    and the prompt hook; each starts ``plugin`` when first called, then calls the started one."""
    for name in TOOL_NAMES:
        stored = entry(name)
        api.register_tool(
            ToolSpec(stored.name, stored.description, stored.parameters, _tool(plugin, name))
        )
    for item in MENU:
        api.register_command(item.spec(_command(plugin, item.name)))
    api.on(BEFORE_PROMPT_BUILD, FirstPromptHook(plugin))


# The entry points below are plain functions returning the started plugin's own coroutine: once
# started, a call costs one attribute read over calling the plugin directly (no coroutine layer).


def _tool(plugin: FirstUse[LivePlugin], name: str) -> ToolHandler:
    async def first(raw: dict[str, Any], caller: Caller | None) -> ToolResult:
        live = await plugin.aget()
        if isinstance(live, Misconfigured):
            return live.tool_result()
        return await live.tools[name].handler(raw, caller)

    def call(raw: dict[str, Any], /, caller: Caller | None = None) -> Awaitable[ToolResult]:
        live = plugin.done
        if isinstance(live, LivePlugin):
            return live.tools[name].handler(raw, caller)
        return first(raw, caller)

    return call


def _command(plugin: FirstUse[LivePlugin], name: str) -> CommandHandler:
    async def first(ctx: CommandContext) -> str:
        live = await plugin.aget()
        if isinstance(live, Misconfigured):
            return live.reply()
        return await live.command_specs[name].handler(ctx)

    def run(ctx: CommandContext) -> Awaitable[str]:
        live = plugin.done
        if isinstance(live, LivePlugin):
            return live.command_specs[name].handler(ctx)
        return first(ctx)

    return run


class FirstPromptHook:
    """The prompt hook of a plugin that starts at first use: no context for a misconfigured one.
    ``peek`` starts it on the caller's thread (a synchronous hook has no other)."""

    def __init__(self, plugin: FirstUse[LivePlugin]) -> None:
        self._plugin = plugin

    def peek(self, ctx: PromptContext | None = None) -> str | object | None:
        live = self._plugin.get()
        return None if isinstance(live, Misconfigured) else live.hook.peek(ctx)

    def __call__(self, ctx: PromptContext) -> Awaitable[str | None]:
        live = self._plugin.done
        return live.hook(ctx) if isinstance(live, LivePlugin) else self._first(ctx)

    async def _first(self, ctx: PromptContext) -> str | None:
        live = await self._plugin.aget()
        return None if isinstance(live, Misconfigured) else await live.hook(ctx)


# -- what a config sells, started on the plugin loop -------------------------------------------


async def start_selling(
    api: GatewayAPI, config: PluginConfig, live: LivePlugin, extras: dict[str, Any]
) -> None:
    """Start what the config sells (the paid endpoint, MCP server, A2A agent) on the plugin
    loop: servers bound, a previous run's settles retried, shared state opened. Each is added
    to ``extras`` (the plugin handle's) and closed with the plugin."""
    log = get_logger("svc_gateway")
    core, commands, runtime = live.core, live.commands, live.core.runtime
    on_endpoint = None  # the A2A agent on the paid endpoint's port
    if config.enable_paid_endpoint:
        from .selling import attach_paid_endpoint

        extend = None
        if config.enable_paid_a2a:
            from .selling.ways_in.a2a.shared import OnEndpoint, shares_endpoint_port

            if shares_endpoint_port(api, config):
                on_endpoint = OnEndpoint(config.paid_a2a_public_url)
                extend = on_endpoint.install
        try:
            endpoint = await attach_paid_endpoint(api, core, extend=extend)
        except ConfigError as error:
            raise ConfigError(handler_hint(str(error), config.agent_handler)) from None
        runtime.add_closer(endpoint.aclose)
        extras["paid_endpoint"] = endpoint
        commands.sales.add("paid endpoint", lambda: endpoint.stats, endpoint.shared_stats)
        core.paid_endpoint_url = endpoint.url
        core.paid_endpoint_bound_url = endpoint.bound_url
        from .chat.seller_notes import startup_notes

        for note in startup_notes(core):  # a URL that will not last is worth a warning
            log.log(logging.WARNING if "is 0" in note else logging.INFO, "%s", note)
    if config.enable_paid_mcp:
        from .selling.ways_in.mcp import attach_paid_mcp

        flow = getattr(extras.get("paid_endpoint"), "flow", None)
        paid_mcp = await attach_paid_mcp(api, core, flow=flow)
        runtime.add_closer(paid_mcp.aclose)
        extras["paid_mcp"] = paid_mcp
        commands.sales.add("paid MCP tool ask", lambda: paid_mcp.stats)
        from .chat.seller_notes import mcp_notes

        for note in mcp_notes(core, paid_mcp.url, paid_mcp.logical_uri("ask")):
            log.info("%s", note)
    if config.enable_paid_a2a:
        if on_endpoint is not None:
            paid_a2a = on_endpoint.started()
        else:
            from .selling.ways_in.a2a import attach_paid_a2a

            running = extras.get("paid_endpoint")  # its flow and agent, when it runs
            flow, agent = getattr(running, "flow", None), getattr(running, "agent", None)
            paid_a2a = await attach_paid_a2a(api, core, flow=flow, agent=agent)
            runtime.add_closer(paid_a2a.aclose)
        extras["paid_a2a"] = paid_a2a
        # its own flow, or the endpoint's (then named once, beside the endpoint)
        commands.sales.add("paid A2A agent", lambda: paid_a2a.flow.stats)
        core.paid_a2a_urls = [paid_a2a.url, paid_a2a.rest_url]
        from .chat.seller_notes import a2a_notes

        for note in a2a_notes(core, paid_a2a.card_url):
            log.info("%s", note)


async def check_dependencies(core: PluginCore) -> StartCheck:
    """The one start-up check (:mod:`svc_gateway.service.checks`) of a plugin built at start:
    its service and ``stateUrl``'s Redis, told in one log line (INFO, or WARNING naming what
    did not answer and the fix). Run on the plugin loop, never inside a host's ``register()``."""
    from .service.checks import log_start_check

    return await log_start_check(core.public_client(), core.config.state_url)


def said_if_failed(started: concurrent.futures.Future[None]) -> None:
    """A selling start that failed after register returned: said in the log (the tools, commands
    and metering keep working; nothing is sold until the gateway restarts with a fix)."""
    if started.cancelled():
        return
    error = started.exception()
    if error is not None:
        from .redact import redact

        get_logger("svc_gateway").error(
            "the svc plugin's paid endpoint, MCP server or A2A agent did not start (%s: %s); "
            "nothing is sold until the gateway restarts with this fixed",
            type(error).__name__,
            redact(str(error)),
        )


def handler_hint(message: str, handler: str | None) -> str:
    """An ``agentHandler`` module that cannot be imported: say where Python looks for it."""
    if handler is None or "cannot import module" not in message:
        return message
    module = handler.partition(":")[0]
    path = module.replace(".", "/")
    return (
        f"{message}: put the directory that holds {path}.py (or the package {module.split('.')[0]}"
        ") on PYTHONPATH, or install it into the gateway's Python; svc-gateway chat also looks "
        "in the directory it is started from"
    )
