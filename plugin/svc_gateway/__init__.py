"""svc chat-gateway plugin: the Agent Payments Service for chat gateways.

``register(api)`` is the entry point every host calls (see :mod:`svc_gateway.host`). Importing
this package is cheap: everything is imported inside ``register`` (and the HTTP server, the
sandbox and the paid endpoint only when a configuration uses them). A plain chat config is
validated, and the plugin built, at first use (:mod:`svc_gateway.startup`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    from .account.core import PluginCore
    from .account.credentials import CredentialStore
    from .chat.accounts import UserAccounts
    from .chat.commands import Commands
    from .chat.context import BalanceContext
    from .config import PluginConfig
    from .host import GatewayAPI, PromptContext
    from .runtime import PluginRuntime
    from .service.transport import SessionFactory
    from .startup import FirstUse, LivePlugin

__version__ = "0.1.0"

#: How much longer than the context's budget a prompt waits for a busy plugin loop.
LOOP_GRACE_SECS = 0.5


class PluginHandle:
    """What ``register`` returns: the live plugin, and ``close()`` to stop it cleanly.

    A plugin that starts at first use (a plain chat config) starts when ``core``, ``commands``
    or ``context`` is read, if no tool, command or prompt started it before; a configuration the
    validation refuses raises :class:`~svc_gateway.config.ConfigError` there. ``accounts`` and
    ``extras`` never start it (such a plugin has no per-user accounts and sells nothing)."""

    def __init__(
        self, runtime: PluginRuntime, plugin: FirstUse[LivePlugin], extras: dict[str, Any]
    ) -> None:
        self.runtime = runtime
        self._plugin = plugin
        #: what the configuration added (the receipts, the paid endpoint, the meter…), by name
        self.extras = extras

    def _live(self) -> LivePlugin:
        from .api_keys import ConfigError
        from .startup import Misconfigured

        live = self._plugin.get()
        if isinstance(live, Misconfigured):
            raise ConfigError(live.error)
        return live

    @property
    def core(self) -> PluginCore:
        return self._live().core

    @property
    def commands(self) -> Commands:
        return self._live().commands

    @property
    def context(self) -> BalanceContext:
        return self._live().context

    @property
    def accounts(self) -> UserAccounts | None:
        from .startup import LivePlugin

        live = self._plugin.done  # not started yet: a plain chat config, with no accounts
        return live.accounts if isinstance(live, LivePlugin) else None

    def close(self) -> None:
        self.runtime.close()


@dataclass
class DegradedPlugin:
    """What ``register(..., on_config_error="degrade")`` returns for an invalid configuration:
    the tools and commands are registered and answer with ``config_error`` and its fix."""

    config_error: str

    def close(self) -> None:
        """Nothing runs: no loop, no client, no server."""


class PromptHook:
    """The ``before_prompt_build`` handler. ``peek()`` answers a cache hit synchronously from
    the caller's thread (hosts with a synchronous hook call it first); awaiting the hook crosses
    to the plugin loop only when ``peek`` cannot answer."""

    def __init__(
        self,
        runtime: PluginRuntime,
        context: BalanceContext,
        accounts: UserAccounts | None = None,
    ) -> None:
        self._runtime = runtime
        self._context = context
        self._accounts = accounts

    def peek(self, ctx: PromptContext | None = None) -> str | object | None:
        """The text, ``None`` for nothing, or :data:`svc_gateway.chat.context.MISS`."""
        return self._context_for(ctx).peek()

    def _context_for(self, ctx: PromptContext | None) -> BalanceContext:
        """A hosted gateway's chat user sees their own balances, never the operator's."""
        if self._accounts is None or ctx is None or not ctx.sender_id:
            return self._context
        from .host import Caller

        caller = Caller(ctx.sender_id, ctx.channel or "")
        return self._accounts.context_for(caller) or self._context

    async def __call__(self, ctx: PromptContext) -> str | None:
        from .chat.context import MISS

        context = self._context_for(ctx)
        text = context.peek()
        if text is MISS:
            # The context's own budget bounds the fetch; this bounds a plugin loop that is busy.
            limit = context.budget + LOOP_GRACE_SECS
            try:
                return await asyncio.wait_for(self._runtime.run(context.text()), limit)
            except TimeoutError:
                return None
        assert text is None or isinstance(text, str)
        return text


@overload
def register(
    api: GatewayAPI,
    *,
    session_factory: SessionFactory | None = None,
    store: CredentialStore | None = None,
    open_browser: Callable[[str], bool] | None = None,
    clock: Callable[[], float] | None = None,
    on_config_error: Literal["raise"] = "raise",
    background_start: bool = False,
    check_at_start: bool = False,
) -> PluginHandle: ...


@overload
def register(
    api: GatewayAPI,
    *,
    session_factory: SessionFactory | None = None,
    store: CredentialStore | None = None,
    open_browser: Callable[[str], bool] | None = None,
    clock: Callable[[], float] | None = None,
    on_config_error: Literal["degrade"],
    background_start: bool = False,
    check_at_start: bool = False,
) -> PluginHandle | DegradedPlugin: ...


def register(
    api: GatewayAPI,
    *,
    session_factory: SessionFactory | None = None,
    store: CredentialStore | None = None,
    open_browser: Callable[[str], bool] | None = None,
    clock: Callable[[], float] | None = None,
    on_config_error: Literal["raise", "degrade"] = "raise",
    background_start: bool = False,
    check_at_start: bool = False,
) -> PluginHandle | DegradedPlugin:
    """Register the nine tools, the commands and the balance hook with a host.

    The keyword arguments are seams for tests and embedding hosts: an aiohttp session factory, a
    credential store, a browser opener, and a monotonic clock for the balance cache. With
    ``on_config_error="degrade"`` an invalid configuration does not raise: the tools and
    commands are registered anyway and each answers with the configuration error and its fix.
    With ``background_start`` (a host that bounds how long loading may take: Hermes) register
    returns once the tools, commands, hook and metering are handed over; the paid endpoint, MCP
    server and A2A agent start on the plugin loop afterwards (``handle.extras["started"]``, a
    ``concurrent.futures.Future``), and a failure there is logged instead of raised. With
    ``check_at_start`` (a host's own entry point: Hermes, AstrBot) a plugin built at start checks
    the service and ``stateUrl``'s Redis on the plugin loop after register returns, and logs the
    answer in one line (``handle.extras["start_check"]``, a future of the
    :class:`~svc_gateway.service.checks.StartCheck`).

    A plain chat config (:func:`svc_gateway.startup.starts_at_first_use`) is validated, and the
    plugin built, at the first tool call, command or prompt: a bad one is answered there as the
    degraded plugin answers, whatever ``on_config_error`` says.
    """
    from .redact import get_logger, install
    from .runtime import PluginRuntime, RuntimeClosed
    from .startup import FirstUse, register_first_use, starts_at_first_use

    install("httpx", "httpcore", "aiohttp.access", "aiohttp.server", "aiohttp.client")
    log = get_logger("svc_gateway")
    raw = api.plugin_config
    build = functools.partial(
        _build,
        api,
        store=store,
        session_factory=session_factory,
        open_browser=open_browser,
        clock=clock,
    )
    extras: dict[str, Any] = {}
    # kept for speed: register is 72 ms after aiohttp; validating here adds 175 ms (pydantic)
    if starts_at_first_use(raw, delivers_commands=getattr(api, "delivers_commands", True)):
        settings = dict(raw)
        runtime = PluginRuntime()

        def start() -> LivePlugin:
            if runtime.closed:
                raise RuntimeClosed("the svc plugin has been closed")
            live = build(_validated(settings), runtime, extras)
            who = live.core.session.address if live.core.session else "nobody (run /svc_login)"
            log.info("svc plugin %s started; logged in as %s", __version__, who)
            return live

        plugin = FirstUse(start, api)
        try:
            register_first_use(api, plugin)
        except BaseException:
            runtime.close()
            raise
        log.info("svc plugin %s registered; it starts at its first use", __version__)
        return PluginHandle(runtime, plugin, extras)

    from .config import ConfigError

    try:
        config = _validated(raw)
    except ConfigError as error:
        if on_config_error != "degrade":
            raise
        from .startup import register_degraded

        register_degraded(api, error)
        return DegradedPlugin(config_error=str(error))
    runtime = PluginRuntime()
    try:
        handle = _register_now(
            api, config, runtime, build, extras, background_start, check_at_start
        )
    except BaseException:
        runtime.close()
        raise
    core = handle.core
    who = core.session.address if core.session else "nobody (run /svc_login)"
    log.info("svc plugin %s registered; logged in as %s", __version__, who)
    return handle


def _validated(raw: Mapping[str, Any]) -> PluginConfig:
    """The full validation: the config's fields, then a service URL for its environment."""
    from .config import load_config, resolve_base_url

    config = load_config(raw)
    # an environment with no URL would log in and then fail every tool: say it at start
    resolve_base_url(config, config.environment)
    return config


def _build(
    api: GatewayAPI,
    config: PluginConfig,
    runtime: PluginRuntime,
    extras: dict[str, Any],
    *,
    store: CredentialStore | None,
    session_factory: SessionFactory | None,
    open_browser: Callable[[str], bool] | None,
    clock: Callable[[], float] | None,
) -> LivePlugin:
    """The plugin of a validated config: core, approvals, context, accounts, commands, tools."""
    from .account.core import PluginCore
    from .approvals.opening import open_approvals
    from .chat.accounts import UserAccounts
    from .chat.commands import Commands
    from .chat.context import BalanceCache, BalanceContext
    from .startup import LivePlugin
    from .tools.catalogue import TOOL_NAMES, lazy_spec

    core = PluginCore(config, runtime, store=store, session_factory=session_factory)
    core.restore_session()
    core.approvals = open_approvals(
        config, delivers_commands=getattr(api, "delivers_commands", True)
    )
    runtime.add_closer(core.approvals.ledger.aclose)

    def balance_context(owner: PluginCore) -> BalanceContext:
        cache = BalanceCache(owner, clock=clock) if clock else BalanceCache(owner)
        owner.on_session_change(lambda: cache.invalidate())
        owner.on_spend(cache.invalidate)
        owner.on_balance(cache.seen)
        return BalanceContext(owner, cache)

    context = balance_context(core)
    accounts = UserAccounts(core, balance_context) if config.per_user_accounts else None
    commands = Commands(
        core,
        open_browser=open_browser,
        input_history=getattr(api, "input_history", None),
        accounts=accounts,
    )
    runtime.add_closer(commands.cancel_pending)
    runtime.add_closer(core.aclose)
    extras["receipts"] = commands.receipts
    core.receipt_sink = commands.receipts.add  # user cores are made later, with the sink
    return LivePlugin(
        core=core,
        commands=commands,
        context=context,
        accounts=accounts,
        tools={name: lazy_spec(core, name, accounts) for name in TOOL_NAMES},
        command_specs={spec.name: spec for spec in commands.specs()},
        hook=PromptHook(runtime, context, accounts),
    )


def _register_now(
    api: GatewayAPI,
    config: PluginConfig,
    runtime: PluginRuntime,
    build: Callable[[PluginConfig, PluginRuntime, dict[str, Any]], LivePlugin],
    extras: dict[str, Any],
    background_start: bool = False,
    check_at_start: bool = False,
) -> PluginHandle:
    """Register a config that sells, or that register must decide on: built here, at start.
    With ``background_start`` what it sells starts on the plugin loop after this returns
    (``extras["started"]``, a future)."""
    from .host import BEFORE_PROMPT_BUILD
    from .startup import FirstUse

    live = build(config, runtime, extras)
    handle = PluginHandle(runtime, FirstUse.started(live, api), extras)
    core, commands, accounts = live.core, live.commands, live.accounts
    for tool in live.tools.values():
        api.register_tool(tool)
    for command in live.command_specs.values():
        api.register_command(command)
    api.on(BEFORE_PROMPT_BUILD, live.hook)
    if config.metered_tools:
        from .host import AROUND_TOOL_CALL
        from .selling.ways_in.metering import ToolMeter

        meter = ToolMeter.create(core, accounts, commands.receipts)
        runtime.add_closer(meter.aclose)
        api.on(AROUND_TOOL_CALL, meter)
        handle.extras["meter"] = meter
        listed = getattr(api, "host_tools", None)  # a host that lists its own tools at start
        if isinstance(listed, dict):
            meter.warn_unoffered(listed)  # the others call it once they know their tools
    if config.enable_paid_endpoint or config.enable_paid_mcp or config.enable_paid_a2a:
        from .startup import said_if_failed, start_selling

        selling = start_selling(api, config, live, handle.extras)
        if background_start:  # register returns now; the servers come up on the plugin loop
            started = runtime.submit(selling)
            started.add_done_callback(said_if_failed)
            handle.extras["started"] = started
        else:
            runtime.run_sync(selling)
    if check_at_start:  # after what it sells is scheduled: the two run side by side
        from .startup import check_dependencies

        handle.extras["start_check"] = runtime.submit(check_dependencies(core))
    return handle
