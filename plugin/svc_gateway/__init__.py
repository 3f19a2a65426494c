"""svc chat-gateway plugin: the Agent Payments Service for chat gateways.

``register(api)`` is the entry point every host calls (see :mod:`svc_gateway.host`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .commands import Commands
    from .context import BalanceContext
    from .core import PluginCore
    from .host import GatewayAPI
    from .login import CredentialStore
    from .runtime import PluginRuntime
    from .transport import SessionFactory

__version__ = "0.1.0"


@dataclass
class PluginHandle:
    """What ``register`` returns: the live plugin, and ``close()`` to stop it cleanly."""

    runtime: PluginRuntime
    core: PluginCore
    commands: Commands
    context: BalanceContext
    extras: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        self.runtime.close()


def register(
    api: GatewayAPI,
    *,
    session_factory: SessionFactory | None = None,
    store: CredentialStore | None = None,
    open_browser: Callable[[str], bool] | None = None,
    clock: Callable[[], float] | None = None,
) -> PluginHandle:
    """Register the nine tools, two commands and the balance hook with a host.

    The keyword arguments are seams for tests and embedding hosts: an aiohttp session factory, a
    credential store, a browser opener, and a monotonic clock for the balance cache.
    """
    from .commands import Commands
    from .config import load_config
    from .context import BalanceCache, BalanceContext
    from .core import PluginCore
    from .host import BEFORE_PROMPT_BUILD, PromptContext
    from .redact import get_logger, install
    from .runtime import PluginRuntime
    from .tools import TOOL_NAMES, TOOLS, to_spec

    config = load_config(api.plugin_config)
    install("httpx", "httpcore", "aiohttp.access", "aiohttp.server")
    log = get_logger("svc_gateway")
    runtime = PluginRuntime()
    try:
        core = PluginCore(config, runtime, store=store, session_factory=session_factory)
        core.restore_session()
        cache = BalanceCache(core, clock=clock) if clock else BalanceCache(core)
        context = BalanceContext(core, cache)
        core.on_session_change(lambda: cache.invalidate())
        core.on_spend(cache.invalidate)
        commands = Commands(core, open_browser=open_browser)
        runtime.add_closer(commands.cancel_pending)
        runtime.add_closer(core.aclose)

        for name in TOOL_NAMES:
            api.register_tool(to_spec(core, TOOLS[name]))
        for spec in commands.specs():
            api.register_command(spec)

        async def before_prompt_build(ctx: PromptContext) -> str | None:
            return await runtime.run(context.text())

        api.on(BEFORE_PROMPT_BUILD, before_prompt_build)
        handle = PluginHandle(runtime=runtime, core=core, commands=commands, context=context)
        if config.enable_paid_endpoint:
            from .paid import attach_paid_endpoint

            handle.extras["paid_endpoint"] = runtime.run_sync(attach_paid_endpoint(api, core))
    except BaseException:
        runtime.close()
        raise
    who = core.session.address if core.session else "nobody (run /svc_login)"
    log.info("svc plugin %s registered; logged in as %s", __version__, who)
    return handle
